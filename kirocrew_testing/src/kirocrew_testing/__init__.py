"""What plugin authors and our own suite test with (extra ``kirocrew-core[testing]``).

Enable the fixtures in a ``conftest.py``::

    pytest_plugins = ["kirocrew_testing.fixtures"]

Fixtures: ``isolated_homes`` (HOME, KIRO_HOME, KIROCREW_HOME under tmp),
``plugin_manager`` (a fresh manager with named register/unregister),
``gateway_client`` (a Starlette test client already signed in as the owner),
``write_guard`` (fails a test that writes outside its temporary directories),
MCP fixture servers (``mcp_stdio_server_params``, ``mcp_http_server``,
``oauth_mcp_server``), and the fake kiro-cli (``fake_kiro_cli``; see
``docs/testing/fake-kiro-cli.md``). ``kirocrew_testing.process_guard``
adds ``process_guard``, which fails a test that leaves a child process running.
"""
