"""The audit pipeline: PySpark jobs over the audit trail.

Owns the reconciliation (accepted vs terminal outcomes, duplicates), the hourly report and the
cutover verification, in batch and streaming mode. Imports only ``core``.
"""
