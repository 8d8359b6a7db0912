"""Golden cases of pool identity (docs/capacity.md, "pool"): a pool is (provider account
identity, lane), the identity taken from the credential's reference (a variable's name, a
file's or a sign-in folder's resolved path) and the provider, never from an account label and
never from the secret's value. Config text in, through the real config loader, samples in,
routes out."""

import re
import sys
from pathlib import Path

import pytest

from agent_run.config.model import parse_config
from agent_run.domain.capacity import capacity_order
from agent_run.engines.accounts import account_identity
from agent_run.services.capacity import readings, route_specs
from agent_run.store.samples import Sample

NOW = 1_800_000_000.0
HOME = Path("/agent-run-home")

HEAD = 'schema_version = 1\ndefault_runtime = "a"\n'


def runtimes(text: str):
    """The config, every engine CLI in it present (this Python stands for it): a runtime whose
    binary is missing is never ranked, which tests/test_capacity_runtimes.py tests on its own."""
    present = re.sub(
        r'^(engine = "(?!demo)[a-z]+")$', rf'\1\nbinary = "{sys.executable}"', text, flags=re.M
    )
    return parse_config(HEAD + present)


def sample(runtime: str, account: str | None, remaining: float, window: str = "5h") -> Sample:
    return Sample(
        runtime, account, "default", window, remaining, NOW + 3600, NOW - 10, NOW + 890, "command"
    )


TWO_RUNTIMES = """[runtimes.a]
engine = "claude"
[runtimes.a.accounts.work]
auth = { env = "KEY_ONE" }
[runtimes.a.accounts.spare]
auth = { env = "KEY_TWO" }
[runtimes.b]
engine = "glm"
base_url = "https://api.anthropic.com"
[runtimes.b.accounts.work]
auth = { env = "KEY_TWO" }
[runtimes.b.accounts.job]
auth = { env = "KEY_ONE" }
"""


def test_one_credential_is_one_pool_whatever_its_label_or_runtime() -> None:
    config = runtimes(TWO_RUNTIMES)
    a, b = config.runtimes["a"], config.runtimes["b"]
    # same label, different keys: two accounts
    assert account_identity(a, "a", "work", HOME) != account_identity(b, "b", "work", HOME)
    # different labels and runtimes, one key at one provider: one account
    assert account_identity(a, "a", "work", HOME) == account_identity(b, "b", "job", HOME)
    assert account_identity(a, "a", "spare", HOME) == account_identity(b, "b", "work", HOME)
    assert account_identity(a, "a", "work", HOME) == "https://api.anthropic.com|env:KEY_ONE"


def test_a_reading_of_one_credential_counts_for_every_alias_and_for_no_other() -> None:
    config = runtimes(TWO_RUNTIMES)
    found = readings(config, [sample("a", "work", 40.0), sample("a", "spare", 90.0)], HOME)
    order = capacity_order(route_specs(config, found, HOME), found, NOW)
    ranked = {
        (r.runtime, r.account): (r.remaining_percent, [(a.runtime, a.account) for a in r.aliases])
        for r in order.routes
    }
    assert ranked == {  # one choice per credential, listed once with its aliases
        ("a", "work"): (40.0, [("a", "work"), ("b", "job")]),  # KEY_ONE, read through a/work
        ("a", "spare"): (90.0, [("a", "spare"), ("b", "work")]),  # KEY_TWO: b's work is a's spare
    }


def test_the_same_label_with_different_keys_never_conflicts() -> None:
    # before, a.work and b.work were one pool: 40 % and 90 % of it "conflicted" (deferred)
    config = runtimes(TWO_RUNTIMES)
    found = readings(config, [sample("a", "work", 40.0), sample("b", "work", 90.0)], HOME)
    order = capacity_order(route_specs(config, found, HOME), found, NOW)
    assert order.deferred == []


def test_aliases_of_one_credential_take_the_larger_weight_never_the_sum() -> None:
    config = runtimes(
        TWO_RUNTIMES.replace(
            "[runtimes.a.accounts.work]", "priority_multiplier = 2.0\n[runtimes.a.accounts.work]"
        ).replace(
            'base_url = "https://api.anthropic.com"\n',
            'base_url = "https://api.anthropic.com"\npriority_multiplier = 3.0\n',
        )
    )
    found = readings(config, [sample("a", "work", 50.0)], HOME)
    order = capacity_order(route_specs(config, found, HOME), found, NOW)
    (only,) = order.routes  # KEY_ONE: a's work and b's job, one choice
    assert (only.runtime, only.account, only.weight) == ("b", "job", 3.0)
    assert [(a.runtime, a.account, a.weight) for a in only.aliases] == [
        ("b", "job", 3.0),
        ("a", "work", 2.0),
    ]


def test_a_file_or_sign_in_is_known_by_its_resolved_path_and_a_provider_by_its_url(
    tmp_path: Path,
) -> None:
    key = tmp_path / "key"
    key.write_text("sk-secret-value-never-in-a-pool\n")
    key.chmod(0o600)
    (tmp_path / "link").symlink_to(key)
    config = runtimes(
        f"""[runtimes.a]
engine = "claude"
auth = {{ file = "{key}" }}
[runtimes.b]
engine = "claude"
auth = {{ file = "{tmp_path / "link"}" }}
[runtimes.c]
engine = "claude"
base_url = "https://other.example"
auth = {{ file = "{key}" }}
[runtimes.cx]
engine = "codex"
auth = {{ login = "native" }}
[runtimes.cy]
engine = "codex"
auth = {{ login = "native", dir = "~/.codex" }}
[runtimes.cz]
engine = "codex"
[runtimes.cz.accounts.work]
auth = {{ login = "native" }}
"""
    )
    r = config.runtimes
    assert account_identity(r["a"], "a", None, HOME) == account_identity(r["b"], "b", None, HOME)
    assert account_identity(r["a"], "a", None, HOME) != account_identity(r["c"], "c", None, HOME)
    # the native sign-in's default folder and the same folder named: one sign-in
    assert account_identity(r["cx"], "cx", None, HOME) == account_identity(
        r["cy"], "cy", None, HOME
    )
    # an account's own sign-in folder is its own
    assert account_identity(r["cz"], "cz", "work", HOME).endswith(
        "login:codex:/agent-run-home/accounts/cz/work"
    )
    every = [account_identity(o, n, None, HOME) for n, o in r.items() if n != "cz"]
    assert not any("sk-secret" in identity for identity in every)  # the reference, never the value


def test_a_removed_accounts_samples_are_ignored_not_an_error() -> None:
    config = runtimes(TWO_RUNTIMES)
    assert readings(config, [sample("a", "gone", 10.0)], HOME) == []


@pytest.mark.parametrize("label", [None, "work"])
def test_a_runtime_without_a_credential_shares_with_no_one(label) -> None:
    config = runtimes(
        '[runtimes.a]\nengine = "demo"\n[runtimes.b]\nengine = "demo"\n'
        '[runtimes.b.accounts.work]\nauth = { env = "K" }\n'
    )
    a = account_identity(config.runtimes["a"], "a", None, HOME)
    assert a != account_identity(config.runtimes["b"], "b", label, HOME)


def test_model_lanes_from_config_tie_a_model_to_its_lane_for_route_auto() -> None:
    from agent_run.domain.errors import NoCapacity
    from agent_run.services.routing import model_lanes, pick

    config = runtimes(
        '[runtimes.a]\nengine = "codex"\nmodels = ["gpt-5.5", "gpt-spark"]\n'
        'auth = { env = "K" }\nmodel_lanes = { gpt-spark = "codex_bengalfox" }\n'
    )
    found = readings(
        config,
        [
            sample("a", None, 80.0),
            Sample("a", None, "codex_bengalfox", "5h", 0.0, NOW + 60, NOW - 1, NOW + 899, "native"),
        ],
        HOME,
    )
    specs = route_specs(config, found, HOME)
    order = capacity_order(specs, found, NOW)
    plain = model_lanes(config, found, specs, {"a": "gpt-5.5"})
    assert pick(order, {"a": "gpt-5.5"}, 0.0, plain).lane == "default"
    spark = model_lanes(config, found, specs, {"a": "gpt-spark"})
    with pytest.raises(NoCapacity) as refused:  # its own lane is exhausted
        pick(order, {"a": "gpt-spark"}, 0.0, spark)
    assert refused.value.details["omitted"] == [
        "a/-/codex_bengalfox: window 5h is exhausted (0 % left)"
    ]


def test_multiplier_precedence_through_the_config_account_over_lane_over_runtime() -> None:
    config = runtimes(
        '[runtimes.a]\nengine = "claude"\nauth = { env = "OWN" }\npriority_multiplier = 2.0\n'
        "priority_lane_multipliers = { sonnet = 3.0 }\n"
        "priority_account_multipliers = { work = 5.0 }\n"
        '[runtimes.a.accounts.work]\nauth = { env = "WORK" }\n'
    )
    samples = [
        Sample(r, acct, lane, w, 90.0, NOW + 3600, NOW - 10, NOW + 890, "command")
        for r, acct in (("a", None), ("a", "work"))
        for lane, w in (("default", "5h"), ("sonnet", "7d"))
    ]
    found = readings(config, samples, HOME)
    order = capacity_order(route_specs(config, found, HOME), found, NOW)
    weights = {(r.account, r.lane): r.weight for r in order.routes}
    assert weights == {
        (None, "default"): 2.0,  # the runtime's multiplier
        (None, "sonnet"): 3.0,  # the lane's overrides it
        ("work", "default"): 5.0,  # the account's overrides both
        ("work", "sonnet"): 5.0,
    }
    assert [(r.account, r.lane) for r in order.routes][:2] == [
        ("work", "default"),
        ("work", "sonnet"),
    ]


def test_a_runtime_with_limits_source_none_is_neither_read_nor_ranked() -> None:
    from agent_run.services.capacity import limit_windows

    config = runtimes(
        '[runtimes.a]\nengine = "demo"\nauth = { env = "A" }\n'
        '[runtimes.off]\nengine = "demo"\nauth = { env = "OFF" }\nlimits_source = "none"\n'
    )
    samples = [sample("a", None, 50.0), sample("off", None, 90.0)]
    found = readings(config, samples, HOME)
    assert {r.runtime for r in found} == {"a"}
    assert {s.runtime for s in route_specs(config, found, HOME)} == {"a"}
    order = capacity_order(route_specs(config, found, HOME), found, NOW)
    assert [r.runtime for r in order.routes] == ["a"] and order.unavailable_runtimes == []
    assert {w.runtime for w in limit_windows(found, NOW, None)} == {"a"}


def test_a_quota_failures_next_route_is_never_an_alias_of_its_own_pool() -> None:
    from agent_run.services.routing import model_lanes, next_route_advice

    config = runtimes(
        TWO_RUNTIMES.replace('engine = "glm"', 'engine = "glm"\nmodels = ["m"]').replace(
            'engine = "claude"', 'engine = "claude"\nmodels = ["m"]'
        )
    )
    # KEY_ONE (a/work = b/job) 90 %, KEY_TWO (a/spare = b/work) 40 %; a run on b/job failed:
    # KEY_ONE ranks first, but a/work spends the very quota b/job ran out of
    found = readings(config, [sample("a", "work", 90.0), sample("a", "spare", 40.0)], HOME)
    specs = route_specs(config, found, HOME)
    order = capacity_order(specs, found, NOW)
    assert [r.account for r in order.routes] == ["work", "spare"]
    lanes = model_lanes(config, found, specs, {"a": "m", "b": "m"})
    advice = next_route_advice(config, order, lanes, "b", "job", "m")
    assert "a/spare/default, 40 % left" in advice and "--runtime a --account spare" in advice
