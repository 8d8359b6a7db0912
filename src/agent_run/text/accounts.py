"""Text renderers of the `accounts`, `models` and `usage` results (registered in `text.render.RENDERERS`)."""

from typing import Any


def accounts(result: Any) -> str:
    if not result.accounts:
        return "no runtime has an auth or an account configured"
    lines = []
    for a in result.accounts:
        label = a.account or "(runtime auth)"
        state = "signed in" if a.signed_in else "NOT signed in"
        default = "  default" if a.is_default else ""
        email = f"  {a.email}" if a.email else ""
        lines.append(f"{a.runtime:<12} {label:<16} {a.auth:<5} {state}{email}{default}")
        lines.append(f"  {a.detail}")
    return "\n".join(lines)


def models(result: Any) -> str:
    lines = []
    for r in result.runtimes:
        marks = " (default runtime)" if r.runtime == result.default_runtime else ""
        listed = ", ".join(f"{m}*" if m == r.default_model else m for m in r.models) or "any model"
        lines.append(f"{r.runtime} [{r.engine}]{marks}: {listed}")
        if r.accounts:
            lines.append(
                "  accounts: "
                + ", ".join(f"{a}*" if a == r.default_account else a for a in r.accounts)
            )
    return "\n".join(lines) + "\n(* default)"


def _cost(value: float | None) -> str:
    return "cost not reported" if value is None else f"${value:.4f}"


def usage(result: Any) -> str:
    lines = []
    for row in result.rows:
        found = row.key._data if hasattr(row.key, "_data") else row.key  # a Record or a dict
        key = "  ".join(
            f"{name}={value if value is not None else '-'}" for name, value in found.items()
        )
        lines.append(
            f"{key}: {row.executions} runs, {row.input_tokens} in / {row.output_tokens} out tokens, "
            f"{_cost(row.cost_usd)}"
        )
    t = result.total
    lines.append(
        f"total: {t.executions} runs, {t.total_tokens} tokens, {_cost(t.cost_usd)}"
        f" ({t.cost_reported_by} reported a cost)"
    )
    return "\n".join(lines)


RENDERERS = {"AccountsResult": accounts, "ModelsResult": models, "UsageResult": usage}
