"""Failure-rate circuit breaker and adaptive rate limiter.

Pure logic with an injected clock and no I/O: the delivery workers ask it whether to pull and
how fast. Imports nothing else of ours. The worker uses :class:`Governor`; the pieces
(:class:`CircuitBreaker`, :class:`AdaptiveRateLimiter`, :class:`SlidingWindow`) stand alone.
"""

from .breaker import BreakerConfig, CircuitBreaker, CircuitState, Transition
from .governor import Governor, GovernorConfig, Snapshot
from .limiter import AdaptiveRateLimiter, LimiterConfig
from .outcome import CallError, CallOutcome, FailureClassifier, is_failure
from .window import SlidingWindow

__all__ = [
    "AdaptiveRateLimiter",
    "BreakerConfig",
    "CallError",
    "CallOutcome",
    "CircuitBreaker",
    "CircuitState",
    "FailureClassifier",
    "Governor",
    "GovernorConfig",
    "LimiterConfig",
    "SlidingWindow",
    "Snapshot",
    "Transition",
    "is_failure",
]
