"""The Pulsar backend of the segment store (pulsar-client and the admin REST API)."""
