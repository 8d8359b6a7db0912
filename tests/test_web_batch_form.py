"""The new-batch form's workflow fields: the generator instruction and the verify timeout."""

import re

from tests.batch_harness import make_repo, wait_batch


def post_form(web, client, form):
    return client.post(
        "/batches", data={**form, "csrf": web.csrf(client)}, headers={"origin": web.origin}
    )


def test_generator_instruction_starts_a_generated_batch_and_a_template_refills_it(web, daemon):
    repo = make_repo()
    client = web.client()
    started = post_form(
        web,
        client,
        {
            "workflow": "generated",
            "project": str(repo),
            "runs": "2",
            "runtime": "demo",
            "generator_instruction": "tasks: auto",
        },
    )
    assert started.status_code == 303, started.text
    batch_id = started.headers["location"].rsplit("/", 1)[1]
    batch = wait_batch(daemon, batch_id)
    assert batch["state"] == "completed" and batch["config"]["prompt"] == "tasks: auto"
    assert len([r for r in batch["runs"] if r["stage"] == "worker"]) == 2
    template = client.get(f"/batches/new?template={batch_id}").text
    assert re.search(
        r'<textarea id="f-generator_instruction"[^>]*>tasks: auto</textarea>', template
    )
    assert re.search(r'<textarea id="f-prompt"[^>]*></textarea>', template)


def test_generator_instruction_errors_show_next_to_it(web, daemon):
    repo = make_repo()
    client = web.client()
    both = post_form(
        web,
        client,
        {
            "workflow": "generated",
            "project": str(repo),
            "runs": "2",
            "prompt": "do it",
            "generator_instruction": "tasks: auto",
        },
    )
    assert both.status_code == 422
    assert "leave Prompt empty" in re.search(
        r'id="e-generator_instruction">([^<]*)<', both.text
    ).group(1)
    too_long = post_form(
        web,
        client,
        {
            "workflow": "generated",
            "project": str(repo),
            "runs": "2",
            "generator_instruction": "x" * 1_000_001,
        },
    )
    assert too_long.status_code == 422
    assert re.search(r'id="e-generator_instruction">[^<]*at most 1000000 characters', too_long.text)
    assert 'id="e-prompt"' not in too_long.text


def test_verify_timeout_reaches_the_batch_and_is_validated(web, daemon):
    repo = make_repo()
    client = web.client()
    bad = post_form(
        web,
        client,
        {
            "workflow": "ranked",
            "project": str(repo),
            "runs": "1",
            "prompt": "p",
            "verify_command": "true",
            "verify_timeout_seconds": "99999",
        },
    )
    assert bad.status_code == 422 and re.search(r'id="e-verify_timeout_seconds">[^<]+<', bad.text)
    good = post_form(
        web,
        client,
        {
            "workflow": "ranked",
            "project": str(repo),
            "runs": "1",
            "runtime": "demo",
            "prompt": "answer: nothing",
            "verify_command": "true",
            "verify_timeout_seconds": "42.5",
        },
    )
    assert good.status_code == 303, good.text
    batch_id = good.headers["location"].rsplit("/", 1)[1]
    assert daemon.call("batch", {"batch_id": batch_id})["config"]["verify_timeout_seconds"] == 42.5
    daemon.call("batch_cancel", {"batch_id": batch_id})
