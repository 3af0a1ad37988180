"""``python -m kirocrew_testing.fake_kiro`` runs the fake kiro-cli (the launcher's child uses this)."""

from kirocrew_testing.fake_kiro.cli import main

raise SystemExit(main())
