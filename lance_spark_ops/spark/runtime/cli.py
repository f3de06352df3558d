"""Command-line scaffold shared by the jobs in ``jobs/``: ``run_job(JOB)`` parses the flags
(one per field of the job's options dataclass, help from its docstring), merges a ``--config``
file and storage options from the environment, logs progress on stderr, runs the job and
prints the metrics - or the error - as one JSON line, last on stdout (``tail -n 1`` picks
it; under spark-submit the progress log and any traceback arrive on stdout too, before it:
Spark's Python runner merges the driver's stderr into its stdout), and returns the exit code
below. A job file is its options dataclass, a ``Job`` and ``sys.exit(run_job(JOB))``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from lance_spark_ops.config_file import load_config
from lance_spark_ops.errors import (
    AccessDeniedError,
    CommitConflict,
    CommitStateUnknown,
    DatasetNotFound,
    IncompatibleTransaction,
    InconsistentDatasetError,
    InvalidInputError,
    LanceError,
)
from lance_spark_ops.namespace.target import add_arguments as add_namespace_arguments
from lance_spark_ops.namespace.target import resolve_arguments as resolve_namespace_arguments
from lance_spark_ops.spark.runtime.config import (
    ENV_STORAGE_OPTION_PREFIX,
    ENV_STORAGE_OPTIONS,
    FALSE_WORDS,
    TRUE_WORDS,
    OptionSpec,
    coerce,
    option_specs,
    parse_bool,
    parse_key_values,
    redact,
    secret_values,
    storage_options_from_env,
    typed_options,
)
from lance_spark_ops.spark.runtime.logs import CurrentStderr

EXIT_OK = 0  # done, including "nothing to do"
EXIT_FAILED = 1  # anything not below
EXIT_USAGE = 2  # bad flags, config file or option values
EXIT_RETRY = 3  # CommitConflict: a concurrent commit won; the dataset is unchanged, run again
EXIT_INCOMPATIBLE = 4  # IncompatibleTransaction: a concurrent change makes the operation impossible
EXIT_UNKNOWN = 5  # CommitStateUnknown: the commit may have landed; check before anything else
EXIT_NOT_FOUND = 6  # DatasetNotFound: no dataset at the URI (checked before Spark starts); do not retry
EXIT_INCONSISTENT = 7  # InconsistentDatasetError / validate findings: the table contradicts itself
EXIT_ACCESS = 8  # AccessDeniedError: the store refused the credentials or the request; do not retry
DEBUG_ENV = "LSO_DEBUG"  # =1: a failed job prints the traceback of a typed error too


EXIT_CODES: tuple[tuple[type[BaseException], int], ...] = (
    (CommitStateUnknown, EXIT_UNKNOWN), (IncompatibleTransaction, EXIT_INCOMPATIBLE),
    (CommitConflict, EXIT_RETRY), (InvalidInputError, EXIT_USAGE), (DatasetNotFound, EXIT_NOT_FOUND),
    (InconsistentDatasetError, EXIT_INCONSISTENT), (AccessDeniedError, EXIT_ACCESS))
ADVICE = {
    EXIT_RETRY: "a concurrent writer committed first; nothing was changed - running the job again is safe",
    EXIT_INCOMPATIBLE: "a concurrent change (e.g. an overwrite) makes this operation impossible; nothing "
                       "was changed - look at the dataset before running again",
    EXIT_UNKNOWN: "the commit may or may not have landed; its files were kept. Check the dataset's latest "
                  "version before running again, and do not delete files by hand",
    EXIT_INCONSISTENT: "the table's manifest contradicts itself or its files; nothing was changed - run "
                       "jobs/validate.py on it for every finding, do not retry",
    EXIT_ACCESS: "the store refused access (credentials missing, invalid or expired, or not allowed by its "
                 "policy); nothing was changed - fix the credentials or the policy, do not retry",
}
EPILOG = f"""\
options come from, lowest precedence first: the defaults, --config FILE, the environment
(storage options only), the flags. Booleans are switches (--FLAG, --no-FLAG);
"--FLAG true|false" works too.

storage options (credentials, endpoints) - prefer the environment or the config file: the
command line is visible to every user of the machine (ps):
  {ENV_STORAGE_OPTIONS}='{{"key": "value", ...}}'   a JSON object
  {ENV_STORAGE_OPTION_PREFIX}<KEY>=value             one key, lower-cased: ..._AWS_REGION -> aws_region
  [storage_options] table in the config file, --storage-option KEY=VALUE
Their values are never printed: they are replaced by *** in logs, errors and metrics.

the last line on stdout is one JSON object: the metrics, or {{"error": {{"type", "message"}}, ...}}
(`tail -n 1`; under spark-submit the progress log and tracebacks arrive on stdout too, before it).
A failure is one line on stderr ("JOB: error: TYPE: message"); unexpected errors (not this
library's typed ones) also print their traceback, and so does any error with --log-level DEBUG
or {DEBUG_ENV}=1.
exit codes:
  0  done (including "nothing to do")
  1  failed (any other error; the dataset is left as it was)
  2  bad usage: flags, config file or option values
  3  commit conflict (CommitConflict): nothing changed, running again is safe
  4  incompatible concurrent change (IncompatibleTransaction): nothing changed, look first
  5  commit state unknown (CommitStateUnknown): the commit may have landed and its files were
     kept - check the dataset's latest version; do not clean up or retry blindly
  6  no dataset at the URI, no such table or namespace root (DatasetNotFound, checked before
     Spark starts): fix the URI or name; do not retry
  7  inconsistent table (InconsistentDatasetError; validate: findings): nothing changed; do not retry
  8  access refused by the store (AccessDeniedError: credentials missing, invalid or expired, or
     not allowed): fix the credentials or the policy; do not retry
"""
METAVARS = {int: "N", float: "X", str: "TEXT"}
POSITIONAL = "positional_"  # argparse dest prefix of Job.positional arguments
LOGGER = "lance_spark_ops"
log = logging.getLogger(LOGGER)


class UsageError(InvalidInputError):
    """The command line is wrong (unknown flag, missing argument, bad value)."""


@dataclass(frozen=True)
class Job:
    """A command-line job: ``run(spark, uri, storage_options, options)`` returns the metrics (a
    dataclass or dict); ``options`` is the dataclass whose fields are the flags (help from its
    docstring's ``Attributes:``); ``choices`` restricts ``str`` fields; ``report(metrics)``
    yields human-readable lines printed before the metrics; ``spark=False`` starts no session
    (a callable decides from the options: ``False`` for a dry run that only plans).
    ``precheck`` runs before the session starts. ``positional`` names option fields also
    taken as arguments before the URI (``SRC URI``;
    one argument alone is the URI); ``status(metrics)`` is the exit code of a run that returned
    (nonzero: it finished but partly failed, e.g. deletes that failed). An option field with
    ``metadata={"secret": True}`` holds ``KEY=VALUE`` items whose values are never printed.
    ``needs_dataset``: the URI must be an existing dataset, checked before Spark starts
    (``DatasetNotFound``, exit 6); off for a job that creates it or takes a file."""

    name: str
    run: Callable[[Any, str, dict[str, Any], Any], Any]
    options: type | None = None
    description: str = ""
    choices: Mapping[str, Sequence[Any]] = field(default_factory=dict)
    uri_help: str = "dataset URI: a local path, file://, s3://, gs://, az://, memory://, ..."
    spark: bool | Callable[[Any], bool] = True
    report: Callable[[Any], Iterable[str]] | None = None
    positional: tuple[str, ...] = ()
    status: Callable[[Any], int] | None = None
    # ``precheck(uri, storage_options, options)``: cheap checks run before the Spark session
    # starts (a bad column or parameter exits 2 without Spark work); returning ``False`` says
    # the run needs no Spark (it gets ``spark=None``: e.g. nothing to do)
    precheck: Callable[[str, dict[str, Any], Any], None] | None = None
    needs_dataset: bool = True


@dataclass
class Request:
    """A parsed command line: what ``Job.run`` receives."""

    uri: str
    options: Any
    storage_options: dict[str, Any] = field(repr=False)  # credentials: never printed
    log_level: str = "INFO"
    namespace_secrets: dict[str, str] = field(default_factory=dict, repr=False)  # --namespace-prop tokens


# -- flags -----------------------------------------------------------------------------------------
class _BoolAction(argparse.Action):
    """``--flag`` / ``--no-flag`` switches that also take ``--flag true|false``."""

    def __init__(self, option_strings: list[str], dest: str, **kw: Any) -> None:
        negatives = ["--no-" + s[2:] for s in option_strings if s.startswith("--")]
        kw.setdefault("metavar", "BOOL")
        super().__init__(option_strings + negatives, dest, nargs="?", **kw)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        if option_string and option_string.startswith("--no-"):
            if values is not None:
                parser.error(f"{option_string} takes no value")
            setattr(namespace, self.dest, False)
            return
        try:
            setattr(namespace, self.dest, True if values is None else parse_bool(values))
        except ValueError as e:
            parser.error(f"{option_string}: {e}")


class _Formatter(argparse.RawDescriptionHelpFormatter):
    def _format_action_invocation(self, action: argparse.Action) -> str:
        if isinstance(action, _BoolAction):
            return ", ".join(action.option_strings)
        return super()._format_action_invocation(action)


class JobArgumentParser(argparse.ArgumentParser):
    """Raises ``UsageError`` instead of exiting, and reads ``--flag`` followed by something
    other than a boolean word as the switch alone (so ``--dry-run URI`` works)."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        kw.setdefault("allow_abbrev", False)
        kw.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kw)

    def error(self, message: str) -> Any:  # type: ignore[override]
        raise UsageError(message)

    def parse_known_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(self._join_bools(argv), namespace)

    def _join_bools(self, argv: list[str]) -> list[str]:
        flags = [s for a in self._actions if isinstance(a, _BoolAction) for s in a.option_strings]
        switches = {s for s in flags if not s.startswith("--no-")}
        negations = {s: "--" + s[5:] for s in flags if s.startswith("--no-")}
        out, i = [], 0
        while i < len(argv):
            arg = argv[i]
            if arg == "--":
                return out + argv[i:]
            if arg in negations:
                arg = f"{negations[arg]}=false"
            if arg in switches:
                nxt = argv[i + 1] if i + 1 < len(argv) else None
                if nxt is not None and nxt.strip().lower() in TRUE_WORDS + FALSE_WORDS:
                    out.append(f"{arg}={nxt}")
                    i += 2
                    continue
                arg = f"{arg}=true"
            out.append(arg)
            i += 1
        return out


def _help(spec: OptionSpec, positional: bool = False) -> str:
    text = spec.help or spec.name.replace("_", " ")
    if spec.required:
        tail = f"required: this flag or the {spec.name.upper()} argument" if positional else "required"
    elif "default" in text.lower():  # the documentation says it (e.g. "yes for scalar types"): once
        return text.rstrip(".").replace("%", "%%")
    elif spec.kind is bool:
        tail = f"default: {'on' if spec.default else 'off'}"
    elif spec.multiple:
        tail = f"default: {', '.join(map(str, spec.default)) or 'none'}; repeatable"
    else:
        tail = f"default: {'none' if spec.default is None else spec.default}"
    return f"{text.rstrip('.')} ({tail})".replace("%", "%%")


def add_dataclass_options(parser: Any, cls: type, choices: Mapping[str, Sequence[Any]] | None = None,
                          positional: Sequence[str] = ()) -> None:
    """One ``--flag`` per field of ``cls`` (snake_case -> dashes), typed from the annotation, with
    the field's documentation, default and choices as help (``positional``: fields also taken
    as arguments). Every default is ``None`` ("not given") so a config file can sit between the
    field defaults and the flags."""
    for spec in option_specs(cls, choices):
        help_text = _help(spec, spec.name in positional)
        kw: dict[str, Any] = {"default": None, "help": help_text, "dest": spec.name}
        if spec.kind is bool and not spec.multiple:
            parser.add_argument(spec.flag, action=_BoolAction, **kw)
            continue
        kw["type"] = _arg_type(spec)
        kw["metavar"] = ("{" + ",".join(map(str, spec.choices)) + "}" if spec.choices is not None
                         else METAVARS[spec.kind])
        if spec.multiple:  # text items one per flag (an item may look like anything), numbers as a list
            kw.update(action="append") if spec.kind is str else kw.update(action="extend", nargs="+")
        parser.add_argument(spec.flag, **kw)


def _arg_type(spec: OptionSpec) -> Callable[[str], Any]:
    single = dataclasses.replace(spec, multiple=False)

    def convert(text: str) -> Any:
        try:
            return coerce(single, text)
        except InvalidInputError as e:
            raise argparse.ArgumentTypeError(e.message.split(": ", 1)[-1]) from None

    convert.__name__ = spec.kind.__name__  # argparse names it in "invalid int value"
    return convert


def options_from_args(args: argparse.Namespace, cls: type) -> Any:
    """The ``cls`` built from the flags that were given (``None``: not given, the field's default)."""
    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in given.items() if v is not None})


def build_parser(job: Job) -> JobArgumentParser:
    parser = JobArgumentParser(description=job.description, epilog=EPILOG)
    docs = {s.name: s for s in option_specs(job.options, job.choices)} if job.positional else {}
    for name in job.positional:
        parser.add_argument(f"{POSITIONAL}{name}", nargs="?", metavar=name.upper(),
                            help=f"{docs[name].help.rstrip('.')} (or --{name.replace('_', '-')})")
    parser.add_argument("uri", nargs="?", help=f"{job.uri_help} (or `uri` in --config)")
    parser.add_argument("--config", metavar="FILE",
                        help="options file, TOML (or JSON if it ends in .json): keys are the flag names in "
                             "snake_case, storage options in a [storage_options] table; flags override it")
    parser.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE",
                        help="a storage option for the dataset's filesystem (repeatable); see below")
    parser.add_argument("--log-level", choices=("DEBUG", "INFO", "WARNING", "ERROR"), default=None,
                        help="level of this library's progress log on stderr (default: INFO)")
    add_namespace_arguments(parser)
    if job.options is not None:
        add_dataclass_options(parser.add_argument_group(f"{job.name} options"), job.options, job.choices,
                              job.positional)
    return parser


def parse_request(job: Job, argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None,
                  seen: dict[str, Any] | None = None) -> Request:
    """Flags over ``--config`` over defaults; storage options: flags over environment over
    config. Raises ``UsageError`` / ``InvalidInputError``; ``seen["uri"]`` is set as soon as
    the URI is known (for the error line)."""
    seen = {} if seen is None else seen
    parser = build_parser(job)
    try:
        ns = parser.parse_args(argv)
    except UsageError:
        seen["uri"] = _uri_in(parser, job, sys.argv[1:] if argv is None else argv)
        raise
    leading = _positionals(job, ns)
    seen["uri"] = ns.uri
    config = load_config(ns.config) if ns.config else {}
    source = ns.config
    storage = config.pop("storage_options", {}) or {}
    if not isinstance(storage, Mapping):
        raise InvalidInputError("storage_options must be a table of KEY = VALUE", path=source)
    storage = {**storage, **storage_options_from_env(environ), **parse_key_values(ns.storage_option)}
    uri = ns.uri or config.pop("uri", None)
    config.pop("uri", None)
    seen["uri"] = uri or ns.table or config.get("table")
    uri, storage, namespace_secrets = resolve_namespace_arguments(ns, config, uri, storage)  # --table
    level = ns.log_level or str(config.pop("log_level", "INFO")).upper()
    seen["log_level"] = level
    if not isinstance(uri, str) or not uri:
        raise UsageError("the dataset URI is required (argument uri, or `uri` in --config)")
    seen["uri"] = uri
    values = typed_options(job.options, config, choices=job.choices, source=source) if job.options else {}
    if config and job.options is None:
        raise InvalidInputError(f"unknown option(s) {', '.join(config)}", path=source)
    options = None
    if job.options is not None:
        for spec in option_specs(job.options, job.choices):
            given = getattr(ns, spec.name)
            if spec.name in leading:
                if given is not None:
                    raise UsageError(f"{spec.name.upper()} given twice (argument and {spec.flag})")
                given = leading[spec.name]
            if given is not None:
                values[spec.name] = tuple(given) if spec.multiple else given
            elif spec.required and spec.name not in values:
                raise UsageError(f"{spec.flag} is required (or `{spec.name}` in --config)")
        options = job.options(**values)
    return Request(uri, options, storage, level, namespace_secrets)


def _uri_in(parser: JobArgumentParser, job: Job, argv: Sequence[str]) -> str | None:
    """The URI of a command line argparse refused (for the error line): the last argument that
    is neither a flag nor a flag's value, when there are as many as ``job`` takes or one."""
    takes_value = {s for a in parser._actions if a.option_strings and a.nargs is None
                   and not isinstance(a, _BoolAction) for s in a.option_strings}
    words, skip = [], False
    for arg in parser._join_bools(list(argv)):
        if skip:
            skip = False
        elif arg.startswith("-") and arg != "-":
            skip = arg in takes_value
        else:
            words.append(arg)
    return words[-1] if words and len(words) in (1, len(job.positional) + 1) else None


def _positionals(job: Job, ns: argparse.Namespace) -> dict[str, Any]:
    """The ``Job.positional`` values given before the URI (all of them, or none: one argument
    alone is the URI); ``ns.uri`` is set to the URI."""
    given = [v for v in (*(getattr(ns, POSITIONAL + n) for n in job.positional), ns.uri) if v is not None]
    if len(given) <= 1:
        ns.uri = given[0] if given else None
        return {}
    if len(given) != len(job.positional) + 1:
        raise UsageError(f"expected {' '.join(n.upper() for n in job.positional)} URI, or the URI alone")
    ns.uri = given[-1]
    return dict(zip(job.positional, given[:-1], strict=True))


def option_secrets(options: Any) -> dict[str, str]:
    """The ``KEY=VALUE`` items of the option fields marked ``metadata={"secret": True}``."""
    if options is None or not dataclasses.is_dataclass(options):
        return {}
    items = [item for f in dataclasses.fields(options) if f.metadata.get("secret")
             for item in getattr(options, f.name) or ()]
    return parse_key_values(items, "a secret option")


# -- running ---------------------------------------------------------------------------------------
class _Redact(logging.Filter):
    def __init__(self, secrets: Sequence[str]) -> None:
        super().__init__()
        self.secrets = secrets

    def filter(self, record: logging.LogRecord) -> bool:
        if self.secrets:
            record.msg, record.args = redact(record.getMessage(), self.secrets), ()
        return True


def setup_logging(level: str = "INFO", secrets: Sequence[str] = ()) -> None:
    """This library's logger to stderr at ``level`` (replacing a handler an earlier call added);
    py4j and pyspark's Python loggers to WARNING."""
    logger = logging.getLogger(LOGGER)
    for h in [h for h in logger.handlers if getattr(h, "_lso_cli", False)]:
        logger.removeHandler(h)
    handler = CurrentStderr()
    handler._lso_cli = True  # type: ignore[attr-defined]
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S"))
    handler.addFilter(_Redact(secrets))
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False
    for name in ("py4j", "pyspark"):
        logging.getLogger(name).setLevel(logging.WARNING)


@contextmanager
def quietly() -> Iterator[None]:
    """This library's progress lines held back (warnings still shown): for a precheck that
    plans, so the run's own plan is the one the log shows."""
    logger = logging.getLogger(LOGGER)
    level = logger.level
    logger.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        logger.setLevel(level)


def exit_code(error: BaseException) -> int:
    for cls, code in EXIT_CODES:
        if isinstance(error, cls):
            return code
    return EXIT_FAILED


def metrics_dict(metrics: Any) -> dict[str, Any]:
    return dataclasses.asdict(metrics) if dataclasses.is_dataclass(metrics) else dict(metrics)


def metric_rows(metrics: Any) -> list[tuple[str, str]]:
    """``(name, value)`` rows of the metrics, values as text (JSON for lists and dicts): a
    two-column table for notebooks (``spark.createDataFrame(rows, "metric string, value string")``)."""
    return [(k, v if isinstance(v, str) else json.dumps(v, default=str, sort_keys=True))
            for k, v in metrics_dict(metrics).items()]


def flush_output() -> None:
    """Flush stdout, this library's and the root logger's handlers and stderr, in that order.
    Under spark-submit both streams reach one pipe (Spark's Python runner merges the driver's
    stderr into its stdout), so what is still buffered comes out in flush order."""
    sys.stdout.flush()
    for logger in (logging.getLogger(LOGGER), logging.getLogger()):
        for handler in logger.handlers:
            handler.flush()
    sys.stderr.flush()


def print_metrics(metrics: Any, secrets: Sequence[str] = ()) -> None:
    """Print the metrics as one JSON line, last (``tail -n 1``), for schedulers that parse job
    output: everything written before it is flushed first."""
    text = json.dumps(metrics_dict(metrics), default=str, sort_keys=True)
    flush_output()
    sys.stdout.write(redact(text, secrets) + "\n")
    sys.stdout.flush()


def debugging(level: str | None = None, environ: Mapping[str, str] | None = None) -> bool:
    """Whether a failed job prints the traceback of a typed error too: ``--log-level DEBUG`` or
    ``LSO_DEBUG=1`` in the environment."""
    env = os.environ if environ is None else environ
    return str(level or "").upper() == "DEBUG" or env.get(DEBUG_ENV, "").strip().lower() in TRUE_WORDS


def _fail(job: Job, uri: str | None, error: Exception, secrets: Sequence[str], debug: bool = False) -> int:
    code = exit_code(error)
    message = redact(str(error), secrets)
    flush_output()  # what the job printed before it failed comes before the error
    if debug or not isinstance(error, LanceError):  # a typed error names what is wrong: one line
        tb = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        sys.stderr.write(redact(tb, secrets))
    elif isinstance(error, UsageError):
        sys.stderr.write(build_parser(job).format_usage())
    advice = f" ({ADVICE[code]})" if code in ADVICE else ""
    sys.stderr.write(f"{job.name}: error: {type(error).__name__}: {message}{advice}\n")
    sys.stderr.flush()
    if len(message) > 2000:  # a Java stack inside a Py4J error: the whole of it went to stderr
        message = message[:2000] + " ..."
    print_metrics({"error": {"type": type(error).__name__, "message": message}, "exit_code": code,
                   "job": job.name, "uri": uri}, secrets)
    return code


def run_job(job: Job, argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Parse ``argv``, run ``job`` and print its metrics; returns the exit code (see EPILOG).
    ``--help`` prints the help and returns 0 with no JSON line."""
    setup_logging()
    secrets: Sequence[str] = ()
    seen: dict[str, Any] = {}
    try:
        request = parse_request(job, argv, environ, seen)
        secrets = secret_values(dict(enumerate([*request.storage_options.values(),
                                                *option_secrets(request.options).values(),
                                                *request.namespace_secrets.values()])))
        uri = request.uri
        setup_logging(request.log_level, secrets)
        t0 = time.perf_counter()
        log.info("%s %s: starting", job.name, uri)
        if job.needs_dataset:  # before a precheck, which may read the dataset
            _require_dataset(uri, request.storage_options)
        checked = job.precheck(uri, request.storage_options, request.options) if job.precheck else None
        wants_spark = job.spark(request.options) if callable(job.spark) else job.spark
        wants_spark = wants_spark and checked is not False  # the precheck found no Spark work
        spark = _session(job) if wants_spark else None
        metrics = job.run(spark, uri, request.storage_options, request.options)
        for line in job.report(metrics) if job.report else ():
            sys.stdout.write(redact(line, secrets) + "\n")
        flush_output()  # the report before the "done" line (one pipe under spark-submit)
        log.info("%s %s: done in %.1f s", job.name, uri, time.perf_counter() - t0)
        print_metrics(metrics, secrets)
        return job.status(metrics) if job.status else EXIT_OK
    except SystemExit as e:  # --help
        return e.code if isinstance(e.code, int) else EXIT_OK
    except Exception as e:  # noqa: BLE001 - every failure ends in an exit code and a JSON line
        return _fail(job, seen.get("uri"), e, secrets, debugging(seen.get("log_level"), environ))


def _require_dataset(uri: str, storage_options: dict[str, Any]) -> None:
    from lance_spark_ops.io.storage import ObjectStore
    from lance_spark_ops.table.dataset import dataset_present

    if not dataset_present(uri, storage_options):
        store = ObjectStore(uri, storage_options or {})
        what = "nothing here" if not store.present("") else \
            "a file, not a dataset directory" if store.is_local and os.path.isfile(store.full_path("")) else \
            "no _versions/ directory here"
        raise DatasetNotFound(f"no Lance dataset here ({what}): check the URI", path=uri)


def _session(job: Job) -> Any:
    return start_session(job.name)


def start_session(name: str) -> Any:
    """The job's Spark session, with a progress line before (starting one takes seconds) and
    one when it is up: how long it took, the master, Spark's version."""
    from lance_spark_ops.spark.runtime.daemon import unship_pyspark

    # spark-submit puts pyspark.zip on the path: imported from it, pyspark is compiled from
    # source on every job start; the installed package of the same version is compiled already
    unship_pyspark()
    from lance_spark_ops.spark.runtime.session import get_spark

    log.info("%s: starting the Spark session", name)
    t0 = time.perf_counter()
    spark = get_spark(f"lance-spark-ops {name}")
    log.info("%s: Spark session up in %.1f s (%s)", name, time.perf_counter() - t0, _describe(spark))
    return spark


def _describe(spark: Any) -> str:
    """``master local[2], Spark 4.0.1`` (what the session tells; Connect sessions: the version)."""
    parts = []
    try:
        parts.append(f"master {spark.conf.get('spark.master')}")
    except Exception:  # noqa: BLE001 - a Connect server may not say
        pass
    parts.append(f"Spark {getattr(spark, 'version', '?')}")
    return ", ".join(parts)


def parse_storage_options(pairs: list[str]) -> dict[str, str]:
    """``["key=value", ...]`` -> dict (kept for callers of the earlier CLI helpers)."""
    return parse_key_values(pairs)
