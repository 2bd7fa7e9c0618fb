"""Alembic migrations of the relational store (audit reports, cutover records, tokens).

Kept inside the package so ``httpbus db upgrade`` finds them wherever httpbus is installed.
Imports nothing else of ours.
"""
