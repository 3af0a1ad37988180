"""Core gateway routes (``/api/health``, ``/api/plugins``), registered like any plugin's."""
