"""What an approved command tries against the bot's config folder: read `.env` and the config, write over the config,
or carry the folder (or a folder above it) away and plant a config of its own where the bot reads it next."""

from __future__ import annotations

import shlex
from pathlib import Path

PLANTED = "owners: [telegram:666]\n"  # a config a stranger would like the live reload to apply

# Each way in a shell of its own, its output dropped: only whether it got through counts.
WAYS = {
    "write over the config": 'cat planted.yaml > "$C/bindings.yaml"',
    "rename a new config over it": 'cp planted.yaml fresh.yaml && mv -f fresh.yaml "$C/bindings.yaml"',
    "move the folder": 'mv "$C" "$C.moved" && mkdir "$C" && cp planted.yaml "$C/bindings.yaml"',
    "move its parent": 'mv "$P" "$P.moved" && mkdir -p "$C" && cp planted.yaml "$C/bindings.yaml"',
    "move a grandparent": 'mv "$G" "$G.moved" && mkdir -p "$C" && cp planted.yaml "$C/bindings.yaml"',
    "swap the folder for a symlink": (
        'mkdir -p "$G/evil" && cp planted.yaml "$G/evil/bindings.yaml" && mv "$C" "$C.old" && ln -s "$G/evil" "$C"'
    ),
    "swap its parent for a symlink": (
        'mkdir -p "$G/evilp/${C##*/}" && cp planted.yaml "$G/evilp/${C##*/}/bindings.yaml" && mv "$P" "$P.old" && '
        'ln -s "$G/evilp" "$P"'
    ),
    "unmount the cover": 'umount -l "$C" && test -e "$C/.env"',
    "unmount in a namespace of its own": (
        'unshare --user --map-root-user --mount sh -c \'umount -l "$C" && mv "$P" "$P.moved"\''
    ),
}


def breakout_script(config_dir: Path, planted: str = PLANTED) -> str:
    """The script, run in the workspace: it prints what reading `.env`, the config and the folder gave, then one line
    per way (`<way>: done` or `<way>: refused`) of planting `planted`, and last writes `made.txt` in the workspace
    (the control)."""
    lines = [
        f'C={shlex.quote(str(config_dir))}; P="${{C%/*}}"; G="${{P%/*}}"; export C P G',
        f"printf %s {shlex.quote(planted)} > planted.yaml",
        'echo "read .env: $(cat "$C/.env" 2>&1)"',
        'echo "read the config: $(cat "$C/bindings.yaml" 2>&1)"',
        'echo "list the folder: $(ls -A "$C" 2>&1 | tr "\\n" " ")"',
        'way() { if sh -c "$2" >/dev/null 2>&1; then echo "$1: done"; else echo "$1: refused"; fi; }',
        *(f"way {shlex.quote(name)} {shlex.quote(code)}" for name, code in WAYS.items()),
        "echo made > made.txt && echo 'write in the workspace: done'",
    ]
    return "\n".join(lines) + "\n"


def got_through(output: str) -> list[str]:
    """The ways the output says got through (none, when the shield holds)."""
    return [name for name in WAYS if f"{name}: refused" not in output.splitlines()]
