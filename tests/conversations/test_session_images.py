"""session_images on its own: downscaling keeps the format, repair handles every inline form and never clobbers.

Real files in a real kiro sessions directory (the test's isolated home); the end-to-end flows
(send, repair through the CLI, the fake failing a broken session) are in test_session_handover.py.
"""

from __future__ import annotations

import base64
import io
import json

from kirocrew_core import kiro_sessions
from kirocrew_conversations import session_images


def picture(width: int, height: int, fmt: str = "PNG", mode: str = "RGB") -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new(mode, (width, height)).save(out, format=fmt)
    return out.getvalue()


def size_of(data: bytes) -> tuple[str, tuple[int, int]]:
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        return str(image.format), image.size


def test_downscale_keeps_small_images_untouched_and_shrinks_big_ones_in_their_format() -> None:
    small = picture(1900, 10)
    assert session_images.downscale(small, "image/png") == (small, "image/png")
    jpeg, mime = session_images.downscale(picture(4000, 3000, "JPEG"), "image/jpeg")
    assert (mime, size_of(jpeg)) == ("image/jpeg", ("JPEG", (1900, 1425)))
    bmp, mime = session_images.downscale(picture(10, 2500, "BMP"), "image/bmp")
    assert (mime, size_of(bmp)) == ("image/png", ("PNG", (8, 1900)))  # a format not kept is saved as PNG
    assert session_images.downscale(b"not an image at all", "image/png") == (b"not an image at all", "image/png")
    assert session_images.is_media_refusal("too many inline media segments: 101 exceeds limit 100")
    assert not session_images.is_media_refusal("Internal error")


def test_repair_trims_data_uris_and_image_lists_keeps_torn_lines_and_never_replaces_a_backup(
        isolated_homes, monkeypatch) -> None:
    monkeypatch.setattr(session_images, "KEEP_ON_REPAIR", 2)
    files = kiro_sessions.flat_files("s1")
    files.transcript.parent.mkdir(parents=True)
    big = base64.b64encode(picture(2600, 20)).decode()
    dot = base64.b64encode(picture(2, 2)).decode()
    lines = [
        {"kind": "Prompt", "data": {"content": [{"kind": "text", "data": "old"}],
                                    "images": [{"data": dot, "mimeType": "image/png"}]}},
        {"kind": "ToolResult", "data": {"output": f"data:image/png;base64,{dot}"}},
        {"kind": "Prompt", "data": {"images": [{"data": dot, "mimeType": "image/png"},
                                               {"data": big, "mimeType": "image/png"}]}},
    ]
    torn = '{"kind": "Prompt", "data": {"ima'
    original = "\n".join([*map(json.dumps, lines), torn]) + "\n"
    files.transcript.write_text(original)
    earlier = kiro_sessions.backup_path(files.transcript, 1)
    earlier.write_text("an earlier backup")

    assert session_images.count_images(files) == 4
    report = session_images.repair(files)
    assert report.as_dict() == {"images": 4, "downscaled": 1, "removed": 2,
                                "backups": [kiro_sessions.backup_path(files.transcript, 2).name]}
    assert earlier.read_text() == "an earlier backup"
    assert kiro_sessions.backup_path(files.transcript, 2).read_text() == original
    first, second, third, kept_torn = files.transcript.read_text().splitlines()
    assert "images" not in json.loads(first)["data"]  # kiro omits an empty list
    assert json.loads(second)["data"]["output"] == session_images.NOTE
    images = json.loads(third)["data"]["images"]
    assert [size_of(base64.b64decode(i["data"]))[1] for i in images] == [(2, 2), (1900, 15)]
    assert kept_torn == torn
    assert session_images.count_images(files) == 2
    assert session_images.repair(files).backups == []  # nothing left to mend: nothing written
