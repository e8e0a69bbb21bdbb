"""Every command's examples, shown at the end of its `--help` (typer's epilog), in pipeline order.

Each example is a command that works as written from the state `specreg demo` leaves: run in the
folder where the demo ran, with `SPECREG_DB=specreg-demo/registry.db` (the preamble says so), on
the demo's models, workload and policy. `tests/commands/test_examples.py` parses every one against
its command and runs them there, in this order (the ones in `NETWORK` need the hub or the package
index and are only parsed). A new command gets its entry here, keyed like `cli.COMMANDS` (a
subcommand as `"group sub"`, the root as `""`).
"""

from __future__ import annotations

import shlex

from specreg.commands.layout import command_lines

PREAMBLE = "Examples, from the folder where `specreg demo` ran, after export SPECREG_DB=specreg-demo/registry.db:"
WIDTH = 78  # click indents an epilog by 2: the lines fit 80 columns
_T = "specreg-demo/models/target.gguf"
_D = "specreg-demo/models/draft.gguf"
_WORKLOAD = "specreg-demo/workload.jsonl"
_POLICY = "specreg-demo/policy.toml"

EXAMPLES: dict[str, tuple[str, ...]] = {
    "": (
        "specreg demo",
        f"specreg check pair {_T} {_D}",
        f"specreg bench admitted --pair 1 --workload {_WORKLOAD}",
        f"specreg audit --policy {_POLICY}",
        f"specreg deploy 1 --policy {_POLICY}",
    ),
    "inspect": (
        "specreg inspect specreg-demo/models/draft.gguf",
        "specreg inspect specreg-demo/models/eagle3-wrong-target.gguf --json --hash",
        "specreg inspect hf://Qwen/Qwen2.5-0.5B-Instruct-GGUF/qwen2.5-0.5b-instruct-q8_0.gguf",
    ),
    "register": (
        f"specreg register {_T} {_D} --license apache-2.0",
        f"specreg register {_D} --rehash --json",
    ),
    "fetch": ("specreg fetch Qwen/Qwen2.5-0.5B-Instruct-GGUF qwen2.5-0.5b-instruct-q8_0.gguf --revision main",),
    "artifacts": ("specreg artifacts", "specreg artifacts --json"),
    "check": (f"specreg check pair {_T} {_D}",),
    "check pair": (
        f"specreg check pair {_T} {_D}",
        f"specreg check pair {_T} specreg-demo/models/near-miss.gguf --verbose",
        f"specreg check pair {_T} --method ngram-mod",
        f"specreg check pair {_T} {_D} -c 8192 -np 2 --budget 1GiB",
        f"specreg check pair {_T} {_D} --strict --format sarif",
    ),
    "pairs": ("specreg pairs", "specreg pairs --admitted --json", "specreg pairs --recheck --runtime llama.cpp-b11434"),
    "drafts": (
        f"specreg drafts {_T} --dir specreg-demo/models --all",
        f"specreg drafts {_T} --dir specreg-demo/models --json",
    ),
    "rules": ("specreg rules list", "specreg rules diff llama.cpp-b11434 llama.cpp-b11549"),
    "rules list": ("specreg rules list", "specreg rules list --json"),
    "rules diff": ("specreg rules diff llama.cpp-b11434 llama.cpp-b11549",),
    "workloads": ("specreg workloads", "specreg workloads --json"),
    "workloads fetch": ("specreg workloads fetch mt-bench",),
    "bench": (f"specreg bench admitted --pair 1 --workload {_WORKLOAD}",),
    "bench admitted": (
        f"specreg bench admitted --pair 1 --workload {_WORKLOAD}",
        f"specreg bench admitted --pair 1 --workload {_WORKLOAD} --draft-max 2,4 --concurrency 1,2",
        f"specreg bench admitted --pair 1 --workload {_WORKLOAD} --temperature 0,0.7",
        f"specreg bench admitted --pair 1 --workload {_WORKLOAD} --budget 1m",
        "specreg bench admitted --pair 1 --workload mt-bench --sample 1 --tune --budget 8m",
    ),
    "runs": ("specreg runs", "specreg runs --by-hardware", "specreg runs show latest"),
    "runs show": (
        "specreg runs show latest",
        "specreg runs show latest --report run.html",
        "specreg runs show latest --json",
    ),
    "audit": (
        f"specreg audit --policy {_POLICY}",
        f"specreg audit --policy {_POLICY} --report audit.html",
        "specreg audit --pair 1 --trust-stat-cache --json",
        f"specreg audit --policy {_POLICY} --format sarif",
    ),
    "deploy": (
        f"specreg deploy 1 --policy {_POLICY}",
        f"specreg deploy 1 --policy {_POLICY} --stratum repetitive --port 8080 --json",
    ),
    "watch": (
        f"specreg watch http://127.0.0.1:8080 --pair 1 --stratum repetitive --policy {_POLICY}",
        "specreg watch http://127.0.0.1:8080 --once --interval 30s --json",
        "specreg watch http://127.0.0.1:8080 --listen 127.0.0.1:9464",
    ),
    "export": (
        "specreg export --all -o this-host.zip",
        "specreg export --run latest -o last-run.zip",
        f"specreg export --format cyclonedx 1 -o pair1.cdx.json --policy {_POLICY}",
    ),
    "sign": ("specreg sign this-host.zip --key host-a.pem",),
    "import": ("specreg import this-host.zip last-run.zip",),
    "demo": ("specreg demo", "specreg demo --dir other-demo", "specreg demo --real"),
}
# need the Hugging Face hub or the package index (and minutes), or what only the user can make
# (`sign`: the signing extra and a key of one's own, docs/security.md; the tests make a key and
# run it; `watch`: a server started with the command `deploy` prints): parsed by the tests, not run
NETWORK = frozenset(
    {
        *EXAMPLES["watch"],
        EXAMPLES["sign"][0],
        EXAMPLES["inspect"][2],
        EXAMPLES["fetch"][0],
        EXAMPLES["workloads fetch"][0],
        EXAMPLES["bench admitted"][4],
        EXAMPLES["demo"][2],
    }
)


def epilog(command: str) -> str:
    """The `--help` epilog of `command` (`""` for the root): the examples, each laid out to paste.

    Click re-wraps an epilog's paragraphs unless one starts with `\\b`: the lines are kept, and a
    long example continues with ` \\`, so every line still pastes as one command.
    """
    lines: list[str] = []
    for example in EXAMPLES[command]:
        lines += ["  " + line for line in command_lines(shlex.split(example), WIDTH - 2, indent=6)]
    return PREAMBLE + "\n\n\b\n" + "\n".join(lines)
