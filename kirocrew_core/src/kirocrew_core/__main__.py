"""``python -m kirocrew_core``: the ``kirocrew`` command where no console script is installed (a source checkout)."""

from kirocrew_core.launcher import main

if __name__ == "__main__":
    main()
