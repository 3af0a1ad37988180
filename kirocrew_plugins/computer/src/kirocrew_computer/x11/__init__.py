"""The Linux X11 computer-use backend (AT-SPI + XTEST through a system-Python helper process)."""
