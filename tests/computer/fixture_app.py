"""A small GTK3 window the X11 backend tests drive (run with /usr/bin/python3).

``fixture_app.py RESULT_FILE [ROWS]``: every handler appends one line to RESULT_FILE,
so a test sees that input really reached the app, not merely that a call returned.
The title deliberately avoids "kirocrew": the chokepoint refuses kirocrew's own windows.
"""

from __future__ import annotations

import sys

import gi

gi.require_version("Gtk", "3.0")
from gi.repository import GLib, Gtk  # noqa: E402

TITLE = "Fixture App"


def main(argv: list[str]) -> int:
    result_path = argv[1]
    rows = int(argv[2]) if len(argv) > 2 else 50
    GLib.set_prgname("fixture-app")
    GLib.set_application_name(TITLE)

    def record(line: str) -> None:
        with open(result_path, "a", encoding="utf-8") as out:
            out.write(line + "\n")

    window = Gtk.Window(title=TITLE)
    window.set_default_size(600, 700)
    window.connect("destroy", Gtk.main_quit)
    box = Gtk.Box(orientation=Gtk.Orientation.VERTICAL, spacing=4)
    window.add(box)

    entry = Gtk.Entry()
    entry.get_accessible().set_name("Name")
    entry.connect("activate", lambda e: record(f"activate {e.get_text()}"))

    def on_key(_w: Gtk.Widget, ev: object) -> bool:
        record(f"key {Gtk.accelerator_name(ev.keyval, ev.state)}")  # type: ignore[attr-defined]
        return False  # let the entry handle it too

    entry.connect("key-press-event", on_key)
    box.pack_start(entry, False, False, 0)

    password = Gtk.Entry()
    password.set_visibility(False)
    password.set_text("hunter2-secret")  # a snapshot must never contain this
    password.get_accessible().set_name("Password")
    box.pack_start(password, False, False, 0)

    box.pack_start(Gtk.Label(label="Status: ready"), False, False, 0)

    button = Gtk.Button(label="Submit")
    button.connect("clicked", lambda _b: record("clicked Submit"))
    box.pack_start(button, False, False, 0)

    check = Gtk.CheckButton(label="Enable feature")
    check.connect("toggled", lambda c: record(f"toggled {c.get_active()}"))
    box.pack_start(check, False, False, 0)

    # A drag target: records where a button press started and where it was released.
    pad = Gtk.EventBox()
    pad.set_size_request(300, 80)
    pad.get_accessible().set_name("Drag pad")
    pad.add(Gtk.Label(label="drag here"))
    pressed: dict[str, tuple[int, int]] = {}

    def on_press(_w: Gtk.Widget, ev: object) -> bool:
        pressed["at"] = (int(ev.x), int(ev.y))  # type: ignore[attr-defined]
        return True

    def on_release(_w: Gtk.Widget, ev: object) -> bool:
        x0, y0 = pressed.pop("at", (-1, -1))
        record(f"drag {x0},{y0} -> {int(ev.x)},{int(ev.y)}")  # type: ignore[attr-defined]
        return True

    pad.connect("button-press-event", on_press)
    pad.connect("button-release-event", on_release)
    box.pack_start(pad, False, False, 0)

    listbox = Gtk.ListBox()
    listbox.get_accessible().set_name("Rows")
    for i in range(rows):
        listbox.add(Gtk.Label(label=f"Row {i}", xalign=0))
    scrolled = Gtk.ScrolledWindow()
    scrolled.add(listbox)
    box.pack_start(scrolled, True, True, 0)

    window.show_all()
    record("ready")
    Gtk.main()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
