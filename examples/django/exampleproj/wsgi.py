"""WSGI entry point: ``gunicorn exampleproj.wsgi`` (threads: ``--threads 4``)."""

from __future__ import annotations

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "exampleproj.settings")
application = get_wsgi_application()
