"""tfringrun -np 4 -H localhost:4 python train.py: the command line (flags.py, config.py, checks.py) turned into
an mpirun command (mpirun.py) that runs supervised (supervise.py), or an elastic job (elastic/driver.py).
The console script and `python -m tfring.runner` both enter at main()."""
import shlex
import sys

from tfring.runner.checks import check, is_elastic
from tfring.runner.config import apply_config_file
from tfring.runner.flags import UsageError, build_parser
from tfring.runner.info import check_build
from tfring.runner.mpirun import plan
from tfring.runner.output import stamp
from tfring.runner.supervise import run_command


def parse(argv):
    """Command line + config file -> checked args.

    Args:
        argv: the arguments (default sys.argv[1:]).

    Returns:
        argparse.Namespace

    Raises:
        UsageError: any problem, in one line.
    """
    args = apply_config_file(build_parser().parse_args(argv))
    check(args)
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    return args


def say_notes(args, stream=None):
    """Prints args.notes (flags and config keys accepted and ignored), one line each, once per job.

    Args:
        args: checked arguments.
        stream: where to (default sys.stderr).
    """
    stream = stream or sys.stderr
    for note in getattr(args, "notes", []):
        stream.write("%stfringrun: %s\n" % (stamp() + " " if args.log_with_timestamp else "", note))
    stream.flush()


def main(argv=None):
    """tfringrun's entry point.

    Args:
        argv: the arguments (default sys.argv[1:]).

    Returns:
        int: 0 after --check-build.

    Raises:
        SystemExit: with the job's exit code (2 on a usage error).
    """
    try:
        args = parse(argv)
        if args.check_build:
            check_build()
            return 0
        if not args.command:
            raise UsageError("no command to run (e.g. tfringrun -np 2 python train.py)")
        if is_elastic(args):
            from tfring.runner.elastic.driver import run_elastic  # only elastic jobs need the driver
            say_notes(args)
            sys.exit(run_elastic(args))
        cmd, env = plan(args)
        say_notes(args)  # after every check: a refused command line stays one line
    except UsageError as e:
        sys.stderr.write("tfringrun: %s\n" % e)
        sys.exit(2)
    if args.verbose:
        print("tfringrun: " + " ".join(shlex.quote(c) for c in cmd), flush=True)
    sys.exit(run_command(cmd, args.output_filename, env=env, timestamp_output=bool(args.prefix_output_with_timestamp),
                         timestamp_logs=bool(args.log_with_timestamp), start_timeout=args.start_deadline,
                         num_ranks=args.num_ranks))


if __name__ == "__main__":
    main()
