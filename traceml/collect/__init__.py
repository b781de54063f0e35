"""The job collector and its relays: every rank's records in one place, one summary for the job.

Above the transport floors: it folds records into an analysis store and writes the summary, which
the wire itself never does. Never imports torch (it runs in a process of its own beside rank 0).
"""
