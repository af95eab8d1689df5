"""The skeleton: the official SDK creates a sandbox on sandlot, finds it, and kills it."""

import pytest
from e2b import Sandbox
from e2b.exceptions import NotFoundException


def test_create_get_kill(server):
    sbx = Sandbox.create(timeout=60)
    info = Sandbox.get_info(sbx.sandbox_id)
    assert info.sandbox_id == sbx.sandbox_id
    sbx.kill()
    with pytest.raises(NotFoundException):
        Sandbox.get_info(sbx.sandbox_id)
