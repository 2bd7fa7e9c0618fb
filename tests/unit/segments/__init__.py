"""Unit tests of the segments package."""
