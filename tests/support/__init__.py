"""Test-only drivers and helpers (never imported by the course's packages)."""
