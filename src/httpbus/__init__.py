"""httpbus: an HTTP asynchronous message bus.

Producers publish with a plain HTTP POST; subscribers register webhook endpoints and httpbus
pushes every message to them. Messages live in segmented topics on Kafka, Pulsar or the
embedded store. See docs/architecture.md for how the packages below fit together.
"""

__version__ = "0.1.0"
