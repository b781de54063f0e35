"""The wire itself: frames, control requests, CURVE keys and the events frames decode into.

The floor every other transport package stands on. Imports only records, config and errors;
never torch, never a socket's owner.
"""
