"""The sysadmin inventory (`SYSADMIN_INVENTORY`, a YAML file; example in deploy/targets.yaml).

    targets:
      nas:
        ssh: {user: admin, host: nas.lan, port: 22, connect_timeout: 5}
        commands:
          journal:
            argv: [journalctl, --no-pager, -u, "{unit}", --since, "{since}"]
            args: {unit: "[A-Za-z0-9@._-]{1,64}", since: "-?[0-9]{1,3}(min|h|d)|today|yesterday"}
            defaults: {since: "-1h"}

A target is reached locally (`local: true`) or over ssh (user, host, optional port, connect
timeout, identity file, and extra `-o` options). Each command is an argument list; a `{name}`
inside an element is filled with a model-supplied argument that must match `args[name]` in full
(a Python regular expression), or with `defaults[name]`. Nothing the model writes ever becomes a
shell string: locally the list is executed as is, and over ssh each element is quoted for the
remote shell (which is how ssh passes a command).
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...core.errors import ForgeError

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_SSH_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_SSH_OPTION = re.compile(r"[A-Za-z]+=[^\s]+")
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
DEFAULT_CONNECT_TIMEOUT = 5


class InventoryError(ForgeError):
    pass


@dataclass(frozen=True)
class Command:
    name: str
    argv: tuple[str, ...]
    args: dict[str, re.Pattern[str]] = field(default_factory=dict)
    defaults: dict[str, str] = field(default_factory=dict)

    def build(self, supplied: dict[str, Any]) -> list[str]:
        """The argument list with every placeholder filled. Raises ValueError naming the
        argument that is unknown, missing or does not match its pattern."""
        for key in supplied:
            if key not in self.args:
                takes = ", ".join(self.args) or "none"
                raise ValueError(f"{self.name} takes no argument {key!r} (it takes: {takes})")
        values: dict[str, str] = {}
        for key, pattern in self.args.items():
            raw = supplied.get(key, self.defaults.get(key))
            if raw is None:
                raise ValueError(f"{self.name} needs the argument {key!r}")
            value = str(raw)
            if "\0" in value or "\n" in value or not pattern.fullmatch(value):
                raise ValueError(f"argument {key}={value!r} does not match {self.name}'s pattern "
                                 f"{pattern.pattern!r}")
            values[key] = value
        return [_PLACEHOLDER.sub(lambda m: values[m.group(1)], part) for part in self.argv]


@dataclass(frozen=True)
class Target:
    name: str
    commands: dict[str, Command]
    local: bool = False
    user: str | None = None
    host: str | None = None
    port: int | None = None
    connect_timeout: int = DEFAULT_CONNECT_TIMEOUT
    identity_file: str | None = None
    ssh_options: tuple[str, ...] = ()

    def argv(self, command: list[str]) -> list[str]:
        """What runs on this machine: the command itself, or ssh carrying it quoted."""
        if self.local:
            return command
        ssh = ["ssh", "-T", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={self.connect_timeout}"]
        if self.port:
            ssh += ["-p", str(self.port)]
        if self.identity_file:
            ssh += ["-i", self.identity_file]
        for option in self.ssh_options:
            ssh += ["-o", option]
        destination = f"{self.user}@{self.host}" if self.user else str(self.host)
        return [*ssh, "--", destination, " ".join(shlex.quote(a) for a in command)]


def load(path: str | Path) -> dict[str, Target]:
    """Read and check the inventory. Raises InventoryError naming the file and the entry."""
    import yaml

    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InventoryError(f"SYSADMIN_INVENTORY: no file {path}") from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise InventoryError(f"{path}: cannot read it: {str(e).splitlines()[0]}") from None
    targets = (data or {}).get("targets") if isinstance(data, dict) else None
    if not isinstance(targets, dict) or not targets:
        raise InventoryError(f"{path}: expected a `targets:` mapping of target names")
    return {str(name): _target(path, str(name), spec) for name, spec in targets.items()}


def _target(path: Path, name: str, spec: Any) -> Target:
    where = f"{path}: target {name!r}"
    if not _NAME.fullmatch(name):
        raise InventoryError(f"{where}: a name is letters, digits, '.', '_' or '-'")
    if not isinstance(spec, dict):
        raise InventoryError(f"{where}: expected a mapping")
    commands = spec.get("commands")
    if not isinstance(commands, dict) or not commands:
        raise InventoryError(f"{where}: no `commands:`")
    parsed = {str(c): _command(where, str(c), body) for c, body in commands.items()}
    if spec.get("local") is True:
        return Target(name, parsed, local=True)
    ssh = spec.get("ssh")
    if not isinstance(ssh, dict) or not ssh.get("host"):
        raise InventoryError(f"{where}: say `local: true` or give `ssh: {{user, host}}`")
    user = ssh.get("user")
    host = str(ssh["host"])
    for label, word in (("user", user), ("host", host)):
        if word is not None and not _SSH_WORD.fullmatch(str(word)):
            raise InventoryError(f"{where}: ssh {label} {word!r} is not a plain name")
    options = tuple(str(o) for o in ssh.get("options") or ())
    for option in options:
        if not _SSH_OPTION.fullmatch(option) or option.lower().startswith(
                ("proxycommand", "localcommand", "permitlocalcommand")):
            raise InventoryError(f"{where}: ssh option {option!r} is not allowed")
    try:
        port = int(ssh["port"]) if ssh.get("port") is not None else None
        timeout = int(ssh.get("connect_timeout", DEFAULT_CONNECT_TIMEOUT))
    except (TypeError, ValueError):
        raise InventoryError(f"{where}: port and connect_timeout are whole numbers") from None
    identity = str(ssh["identity_file"]) if ssh.get("identity_file") else None
    return Target(name, parsed, user=str(user) if user else None, host=host, port=port,
                  connect_timeout=timeout, identity_file=identity, ssh_options=options)


def _command(where: str, name: str, body: Any) -> Command:
    where = f"{where}, command {name!r}"
    if not _NAME.fullmatch(name):
        raise InventoryError(f"{where}: a name is letters, digits, '.', '_' or '-'")
    if isinstance(body, list):
        body = {"argv": body}
    argv = body.get("argv") if isinstance(body, dict) else None
    if not isinstance(argv, list) or not argv or not all(isinstance(a, (str, int)) for a in argv):
        raise InventoryError(f"{where}: `argv` must be a list of words")
    argv = [str(a) for a in argv]
    try:
        args = {str(k): re.compile(str(v)) for k, v in (body.get("args") or {}).items()}
    except re.error as e:
        raise InventoryError(f"{where}: bad argument pattern: {e}") from None
    defaults = {str(k): str(v) for k, v in (body.get("defaults") or {}).items()}
    used = {m for part in argv for m in _PLACEHOLDER.findall(part)}
    if _PLACEHOLDER.search(argv[0]):
        raise InventoryError(f"{where}: the program itself cannot be an argument")
    missing = used - set(args)
    if missing:
        raise InventoryError(f"{where}: no pattern under `args` for {sorted(missing)[0]!r}")
    return Command(name, tuple(argv), args, defaults)
