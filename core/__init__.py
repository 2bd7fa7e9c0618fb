"""The domain model shared by every part of httpbus.

Owns the pydantic models (Project, Topic, Segment, pointers, Subscription and its policies,
Message), the error codes and the one exception tree, and pure logic every deployable needs:
the filter language, retry schedules, message ids. It performs no I/O and imports nothing
else of ours.
"""
