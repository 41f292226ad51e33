"""``kernelfix serve``: the judge as an authenticated HTTP service for training loops (docs/service.md)."""

from __future__ import annotations

import argparse
import ipaddress
import socket
import sys

from kernelfix.cli.common import EXIT_OK, UsageError, add_judge_args, judge_config_for, verbosity_args


def add_parser(sub) -> None:
    p = sub.add_parser(
        "serve",
        help="serve the judge over HTTP, with a bearer token (for training loops)",
        description=(
            "Serve the judge over HTTP: POST /v1/evaluate with {task, candidate, backward, profile, sanitize} (source text) answers "
            "with the verdict's JSON, POST /v1/batch judges many at once, GET /v1/health shows the queue and the GPUs. "
            "Every request needs 'Authorization: Bearer <token>'. Warm judges (one per task) are kept per GPU and reused; "
            "when every GPU's threads and the queue are full, a request gets 503 with Retry-After and nothing of it is "
            "taken. Listens on this machine only (127.0.0.1) unless --host says otherwise."
        ),
        epilog=(
            "The token: --token-file F, else ~/.config/kernelfix/serve-token; a missing file is made (mode 0600) with a new "
            "random token. Clients read the same file (kernelfix.serve.client.JudgeClient) or send its contents. "
            "Ctrl-C or SIGTERM stops it once the requests under way are answered (the exit status is then the signal's: "
            "130, 143). Exit code 2: bad usage (a flag, the token file, an address it cannot listen on). The sanitizer runs "
            'on wrong kernels as the config says (on) unless a request sends "sanitize": false, as kernelfix\'s RL rewards '
            "do; --no-sanitize turns it off for requests that do not ask for it."
        ),
    )
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1: this machine only; anything else is reachable from the network)",
    )
    p.add_argument("--port", type=int, default=8000, help="port (default 8000; 0: any free port, printed)")
    p.add_argument(
        "--token-file",
        metavar="F",
        help="the bearer token's file (made, mode 0600, when missing; default ~/.config/kernelfix/serve-token)",
    )
    p.add_argument(
        "--gpus",
        metavar="LIST",
        help="GPUs to judge on, as CUDA_VISIBLE_DEVICES names them: 'all' (default: every visible GPU) or a list (0,1); "
        "one set of warm judges and threads per GPU, in this one process",
    )
    p.add_argument(
        "--per-gpu",
        type=int,
        default=2,
        metavar="N",
        help="evaluations at once per GPU (their builds overlap; timing queues on the GPU; default 2)",
    )
    p.add_argument(
        "--queue",
        type=int,
        default=64,
        metavar="N",
        help="requests that may wait beyond those running; more get 503 (default 64)",
    )
    p.add_argument(
        "--judges-per-gpu",
        type=int,
        default=4,
        metavar="N",
        help="warm judges (tasks) kept per GPU, least recently used dropped first (default 4)",
    )
    p.add_argument(
        "--standby",
        type=int,
        default=1,
        metavar="N",
        help="candidate workers each warm judge keeps started ahead, so a request's candidate goes straight to its build "
        "(each a process with its GPU context; default 1, 0 for none)",
    )
    p.add_argument(
        "--max-body-mb", type=float, default=4.0, metavar="MB", help="largest request body; larger gets 413 (default 4)"
    )
    p.add_argument("--max-batch", type=int, default=64, metavar="N", help="items in one /v1/batch request (default 64)")
    p.add_argument(
        "--ssl-certfile",
        metavar="FILE",
        help="serve HTTPS with this certificate (with --ssl-keyfile): the token then never travels in clear",
    )
    p.add_argument("--ssl-keyfile", metavar="FILE", help="the certificate's private key")
    add_judge_args(p)
    verbosity_args(p, quiet="warnings and errors only: no line per request", verbose="the HTTP server's debug log too")
    p.set_defaults(func=run)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bind_warning(host: str, tls: bool) -> str | None:
    """What to say when the server is reachable from other machines; None on loopback."""
    if is_loopback(host):
        return None
    lines = [
        f"WARNING: listening on {host}: every machine that can reach it can ask this judge to run code on this machine's GPU "
        "(each candidate in the judge's sandbox); only the token keeps them out.",
    ]
    if not tls:
        lines.append(
            "WARNING: plain HTTP: the token travels in clear. Use --ssl-certfile/--ssl-keyfile, or keep the default "
            "127.0.0.1 and reach it through an SSH tunnel."
        )
    return "\n".join(lines)


def listen(host: str, port: int) -> socket.socket:
    """A listening socket, bound here so that a busy port or a bad address is a usage error (exit 2)."""
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
    except OSError as e:
        raise UsageError(f"cannot listen on {host}:{port}: {e}") from None
    sock.set_inheritable(True)
    return sock


def run(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from kernelfix.serve.app import create_app
    except ImportError as e:
        raise UsageError(
            f"kernelfix serve needs FastAPI and uvicorn ({e.name} is missing): pip install 'kernelfix[serve]'"
        ) from None
    from kernelfix.library.judge_pool import JudgePool, gpu_slots
    from kernelfix.serve.auth import TokenError, load_or_make
    from kernelfix.tools.judge import resolve_device

    for flag, value, least in (
        ("--per-gpu", args.per_gpu, 1),
        ("--queue", args.queue, 0),
        ("--judges-per-gpu", args.judges_per_gpu, 1),
        ("--max-batch", args.max_batch, 1),
        ("--standby", args.standby, 0),
    ):
        if value < least:
            raise UsageError(f"{flag} must be at least {least}")
    if args.max_body_mb <= 0:
        raise UsageError("--max-body-mb must be above 0")
    if bool(args.ssl_certfile) != bool(args.ssl_keyfile):
        raise UsageError("--ssl-certfile and --ssl-keyfile go together")
    cfg = judge_config_for(args)
    try:
        token, token_path, made, mode_warning = load_or_make(args.token_file)
    except TokenError as e:
        raise UsageError(str(e)) from None
    device, notice = resolve_device(cfg.device)
    # Every judge the same device, and the token's file hidden from every candidate like the user's credentials.
    cfg = cfg.model_copy(
        update={
            "device": device,
            "sandbox": cfg.sandbox.model_copy(update={"hidden": [*cfg.sandbox.hidden, str(token_path)]}),
        }
    )
    try:
        slots = gpu_slots(args.gpus, device)
    except ValueError as e:
        raise UsageError(f"--gpus: {e}") from None
    sock = listen(args.host, args.port)
    tls = bool(args.ssl_certfile)

    err = sys.stderr
    if notice and args.verbosity >= 0:
        print(f"kernelfix serve: note: {notice}", file=err)
    warning = bind_warning(args.host, tls)
    if warning:
        print(warning, file=err)
    if mode_warning:
        print(f"kernelfix serve: WARNING: {mode_warning}", file=err)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    where = ", ".join(f"GPU {g}" for g in slots) if slots != [None] else device
    print(
        f"kernelfix serve: http{'s' if tls else ''}://{shown}:{port} judging on {where}, {args.per_gpu} at a time each, "
        f"queue {args.queue}; token {'made in' if made else 'from'} {token_path}",
        file=err,
        flush=True,
    )

    pool = JudgePool(
        cfg,
        gpus=slots,
        per_gpu=args.per_gpu,
        queue=args.queue,
        judges_per_gpu=args.judges_per_gpu,
        standby=args.standby,
    )
    app = create_app(pool, token=token, max_body_bytes=int(args.max_body_mb * 2**20), max_batch=args.max_batch)
    config = uvicorn.Config(
        app,
        log_level={-1: "warning", 1: "debug"}.get(args.verbosity, "info"),
        server_header=False,
        ssl_certfile=args.ssl_certfile,
        ssl_keyfile=args.ssl_keyfile,
        # Connections beyond what the queue could ever hold get uvicorn's own 503; health checks keep some room.
        limit_concurrency=2 * (pool.capacity + args.queue) + 32,
    )
    server = uvicorn.Server(config)
    server.run(sockets=[sock])
    return EXIT_OK if server.started else 2
