"""The Kafka backend of the segment store (confluent-kafka, acks=all, idempotent)."""
