"""Failure-rate circuit breaker and adaptive rate limiter.

Pure logic with an injected clock and no I/O: the delivery workers ask it whether to pull and
how fast. Imports nothing else of ours.
"""
