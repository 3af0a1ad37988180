"""The gateway: the Starlette app plugins extend, its owner authentication, and ``kirocrew serve``.

Nothing here imports starlette or uvicorn at module level; ``app.create_app``
and ``serve.serve`` import them when they run.
"""
