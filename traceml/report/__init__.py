"""HTML renderings of final_summary.json: the report, the comparison page, the notebook card.

Readers of summaries only: no I/O besides what the caller asks for, never torch or textual. Charts
come from plotly with its JavaScript inlined, so a report opens without a network.
"""
