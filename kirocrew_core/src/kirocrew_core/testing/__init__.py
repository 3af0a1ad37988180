"""What plugin authors and our own suite test with (extra ``kirocrew-core[testing]``).

Enable the fixtures in a ``conftest.py``::

    pytest_plugins = ["kirocrew_core.testing.fixtures"]

Fixtures: ``isolated_homes`` (HOME, KIRO_HOME, KIROCREW_HOME under tmp),
``plugin_manager`` (a fresh manager with named register/unregister),
``gateway_client`` (a Starlette test client already signed in as the owner) and
``write_guard`` (fails a test that writes outside its temporary directories).
"""
