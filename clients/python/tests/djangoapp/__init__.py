"""A small Django project for test_django.py (configured by the test, no database)."""
