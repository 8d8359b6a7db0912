"""`list_dir` and `project_inspect`: the folder picker's tools, confined to `[web] roots`."""

import os

import pytest

from agent_run.config.model import parse_config
from agent_run.domain.errors import ConfigInvalid, InvalidRequest
from tests.batch_harness import git, make_repo
from tests.harness import TEST_CONFIG, DaemonProcess, cli_json, make_home, remove_home, short_tmpdir


@pytest.fixture
def rooted():
    """A daemon whose only allowed root is a fresh folder holding a repository, a plain folder,
    a hidden folder, a file, and symlinks in and out of the root."""
    root = short_tmpdir("arr-")
    outside = short_tmpdir("aro-")
    repo = make_repo()
    os.rename(repo, root / "proj")
    (root / "proj" / "pkg").mkdir()
    (root / "plain").mkdir()
    (root / ".hidden").mkdir()
    (root / "file.txt").write_text("x")
    os.symlink(outside, root / "escape")
    os.symlink(root / "plain", root / "alias")
    home = make_home(TEST_CONFIG + f'[web]\nroots = ["{root}"]\n')
    daemon = DaemonProcess(home).start()
    yield daemon, root, outside
    daemon.stop()
    remove_home(home)


def test_list_dir_shows_the_roots_then_folders_inside_them_only(rooted):
    daemon, root, _outside = rooted
    top = daemon.call("list_dir", {})
    assert top["roots"] == [str(root)] and [e["path"] for e in top["entries"]] == [str(root)]
    listing = daemon.call("list_dir", {"path": str(root)})
    names = {e["name"]: e for e in listing["entries"]}
    assert set(names) == {"alias", "plain", "proj"}  # no file, no hidden folder, no escaping link
    assert names["alias"]["path"] == str(root / "plain")  # symlinks resolved
    assert names["proj"]["is_repository"] and not names["plain"]["is_repository"]
    assert listing["parent"] is None  # the root's parent is outside
    inner = daemon.call("list_dir", {"path": str(root / "proj")})
    assert inner["parent"] == str(root) and [e["name"] for e in inner["entries"]] == ["pkg"]


@pytest.mark.parametrize("where", ["/", "/etc", "outside", "escape", "relative"])
def test_list_dir_and_inspect_refuse_anything_outside_the_roots(rooted, where):
    daemon, root, outside = rooted
    path = {"outside": str(outside), "escape": str(root / "escape"), "relative": "plain"}.get(
        where, where
    )
    for tool in ("list_dir", "project_inspect"):
        with pytest.raises(InvalidRequest) as err:
            daemon.call(tool, {"path": path})
        assert err.value.field == "path"


@pytest.mark.parametrize("hostile", ["nul", "loop", "too_long"])
def test_a_path_that_cannot_be_resolved_is_refused_naming_the_field(rooted, hostile):
    """A NUL byte, a symlink loop, a name longer than the system allows: each is the caller's
    bad input (InvalidRequest on `path`), never the daemon's internal error."""
    daemon, root, _outside = rooted
    os.symlink(root / "loop", root / "loop")
    path = {
        "nul": f"{root}/pl\0ain",
        "loop": str(root / "loop"),
        "too_long": f"{root}/{'x' * 300}",
    }[hostile]
    for tool in ("list_dir", "project_inspect"):
        with pytest.raises(InvalidRequest) as err:
            daemon.call(tool, {"path": path})
        assert err.value.field == "path"
    listing = daemon.call("list_dir", {"path": str(root)})  # the loop inside is left out
    assert {e["name"] for e in listing["entries"]} == {"alias", "plain", "proj"}


def test_project_inspect_names_root_subdir_branch_and_head(rooted):
    daemon, root, _outside = rooted
    info = daemon.call("project_inspect", {"path": str(root / "proj" / "pkg")})
    assert info["is_repository"] and info["repository_root"] == str(root / "proj")
    assert info["subdir"] == "pkg" and info["branch"] == "main"
    assert (
        info["head"] == git(root / "proj", "rev-parse", "HEAD")
        and info["head_subject"] == "initial"
    )
    plain = daemon.call("project_inspect", {"path": str(root / "plain")})
    assert plain == {
        "path": str(root / "plain"),
        "is_repository": False,
        "repository_root": None,
        "subdir": None,
        "branch": None,
        "head": None,
        "head_subject": None,
    }
    assert cli_json(daemon.home, "folders", "inspect", str(root / "proj"))["branch"] == "main"


def test_the_filesystem_root_cannot_be_an_allowed_root():
    for roots in ('["/"]', '["/tmp/.."]', '["relative"]'):
        with pytest.raises(ConfigInvalid) as err:
            parse_config(TEST_CONFIG + f"[web]\nroots = {roots}\n")
        assert err.value.field.startswith("web.roots")


def test_the_web_picker_walks_the_roots_and_inspects_the_chosen_folder(rooted):
    from tests.web_harness import WebProcess

    daemon, root, outside = rooted
    web = WebProcess(daemon.home).start()
    try:
        client = web.client()
        listing = client.get("/folders", params={"path": str(root)}).text
        assert (
            "proj/" in listing
            and "plain/" in listing
            and "escape" not in listing
            and ".hidden" not in listing
        )
        chosen = client.get("/batches/new", params={"project": str(root / "proj" / "pkg")}).text
        assert f'value="{root / "proj" / "pkg"}"' in chosen
        assert "branch <code>main</code>" in chosen and "folder <code>pkg</code>" in chosen
        refused = client.get("/folders", params={"path": str(outside)})
        assert refused.status_code == 400 and "outside the allowed roots" in refused.text
    finally:
        web.stop()
