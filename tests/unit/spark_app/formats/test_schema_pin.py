"""The reader schema's version pinned per epoch (spark_app/formats/schema_pin.py): a restore reads
what the epoch started with, a fresh epoch resolves `latest` again, a spec version wins."""

from __future__ import annotations

import pytest

from spark_app.formats import schema_pin as pin
from spark_app.formats.schema_pin import FROM_CHECKPOINT, FROM_SPEC, RESOLVED, Pin, PinUnreadable

pytestmark = pytest.mark.unit

LATEST = {"value": ("orders-value", "latest")}


def test_a_fresh_epoch_resolves_latest_and_a_restore_keeps_the_pinned_version():
    # a fresh epoch: no pins yet, so latest is resolved now (and must be written)
    assert pin.versions(LATEST, None) == {"value": (None, RESOLVED)}
    resolved = {"value": Pin("value", "orders-value", 1, RESOLVED)}
    assert pin.needs_writing(resolved)
    stored = pin.from_json(pin.to_json(resolved))
    assert stored == {"value": ("orders-value", 1)}
    # a restore of the same epoch: version 1, whatever latest is now; nothing to write
    assert pin.versions(LATEST, stored) == {"value": (1, FROM_CHECKPOINT)}
    assert not pin.needs_writing({"value": Pin("value", "orders-value", 1, FROM_CHECKPOINT)})
    # a redeploy is a new epoch with an empty checkpoint: latest again
    assert pin.versions(LATEST, {}) == {"value": (None, RESOLVED)}


def test_a_spec_version_wins_and_a_pin_counts_only_for_its_subject():
    stored = {"value": ("orders-value", 3), "key": ("orders-key", 2)}
    requested = {"value": ("orders-value", 5), "key": ("other-key", "latest")}
    assert pin.versions(requested, stored) == {"value": (5, FROM_SPEC), "key": (None, RESOLVED)}
    # a spec version is not written to the file: the spec says it on every start
    pins = {
        "value": Pin("value", "orders-value", 5, FROM_SPEC),
        "key": Pin("key", "other-key", 7, RESOLVED),
    }
    assert pin.from_json(pin.to_json(pins)) == {"key": ("other-key", 7)}
    assert pins["key"].report() == {"subject": "other-key", "version": 7, "pinned": RESOLVED}


@pytest.mark.parametrize(
    "text",
    ["", "[]", '{"v": 2, "columns": {}}', '{"v": 1, "columns": {"value": {"subject": "s"}}}',
     '{"v": 1, "columns": {"value": {"subject": "s", "version": "latest"}}}'],
)  # fmt: skip
def test_a_damaged_pin_file_is_an_error_never_a_new_resolution(text):
    with pytest.raises(PinUnreadable, match=pin.PIN_FILE):
        pin.from_json(text)
