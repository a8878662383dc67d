#!/usr/bin/env bash
# One device call that spends a short GPU lease (docs/gpu.md, "A lease, step by step"): the GPU
# check first, then a study's GPU cells for the seconds left, and everything packed into $OUT
# within the device tool's limits (8 files of about 16 MB at most, 2 folders down; checkpoints
# over that in parts of 15 MB).
#   benchmarks/device_lease.sh CHECK_SECONDS STUDY_SECONDS STUDY [kt study run options...]
# e.g., with carry [".devcarry", "runs/checkpoints/baselines"] (the checkpoints only when under
# about 30 MB: a call carries 64 MiB in all) and timeout_s 600:
#   benchmarks/device_lease.sh 390 140 baselines --models gkt cl4kt --workers 6
# CHECK_SECONDS 0 skips the check; GPU_CHECK_ARGS adds to it (e.g. "--models gkt kqn
# --peer-models gkt kqn"). Back here: `kt leaderboard FILES_AT/STUDY.json --merge-into
# results/STUDY.json` (by run key: rows landed here meanwhile are kept) and `tar xzf
# FILES_AT/checkpoints.tgz --keep-newer-files` (the checkpoints the study wrote there; in parts:
# `cat FILES_AT/checkpoints.tgz.* | tar xz --keep-newer-files`).
# From the environment: OUT (required), DEVICE (cuda), DATA_ROOT (.devcarry/data), PYTHON
# (python3). Exit status: the check's or the study's, whichever failed (124: stopped at time).
set -uo pipefail
usage() { sed -n 2,16p "$0" >&2; exit 2; }
[ $# -ge 3 ] || usage
check=$1 study_s=$2 study=$3
shift 3
if ! [[ $check =~ ^[0-9]+$ && $study_s =~ ^[0-9]+$ ]]; then
    echo "seconds must be whole numbers, got $check and $study_s" >&2
    usage
fi
if ! [[ $study =~ ^[A-Za-z0-9_-]+$ ]]; then  # it names a folder under runs/checkpoints
    echo "STUDY must be a study's name (letters, digits, _ and -), got '$study'" >&2
    usage
fi
[ -n "${OUT:-}" ] && [ -d "$OUT" ] || { echo "OUT must name an existing folder" >&2; exit 2; }
out=$(cd "$OUT" && pwd)
device=${DEVICE:-cuda}
py=${PYTHON:-python3}
cd "$(dirname "$0")/.." || exit 2
data=${DATA_ROOT:-.devcarry/data}
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/.devcarry/site${PYTHONPATH:+:$PYTHONPATH}
rc_check=0 rc_study=0
if [ "$check" -gt 0 ]; then
    # shellcheck disable=SC2086  # GPU_CHECK_ARGS is a list of words
    "$py" benchmarks/gpu_check.py --device "$device" --zoo --pykt-src .devcarry/pykt-src-models \
        --data-dir "$data/assist2009" --budget "$check" --out "$out" ${GPU_CHECK_ARGS:-} \
        > "$out/check_log.txt" 2>&1
    rc_check=$?
    tail -n 40 "$out/check_log.txt"
    rm -rf "$out/gpu_check_parts"  # their rows are in gpu_check.json; the files would count
fi
if [ "$study_s" -gt 0 ]; then
    # the checkpoints written after the stamp are the ones to bring back; the stamp lies beside
    # them, so both times come from one filesystem's clock (the 2026-11-28 lease's stamp in /tmp
    # found none of the eight runs' checkpoints: the tree's filesystem there may keep another clock)
    dir=runs/checkpoints/$study
    made=0
    [ -d "$dir" ] || made=1
    stamp=
    if mkdir -p "$dir" && stamp=$(mktemp -p "$dir" .lease-stamp.XXXXXX); then
        trap 'rm -f "$stamp"' EXIT  # a lease killed mid-study leaves no stamp behind
    else
        echo "no stamp in $dir: the study's checkpoints will not be packed" >&2
    fi
    # timeout signals its whole process group, the study's pool workers with it; -k: a study
    # that hangs on SIGTERM is killed 15 s later, so the packing below still runs
    timeout -k 15 "$study_s" "$py" -m kt_lib.runs.studies run "$study" --device "$device" \
        --data-root "$data" "$@" > "$out/study_log.txt" 2>&1
    rc_study=$?
    echo "study $study: exit $rc_study (124: stopped at $study_s s)"
    grep -v "epoch [0-9]*:" "$out/study_log.txt" | tail -n 5
    cp "results/$study.json" "$out/$study.json"
    if [ -n "$stamp" ]; then
        find "$dir" -type f -newer "$stamp" ! -name '*.tmp' ! -name '.lease-stamp.*' -print0 \
            | tar czf "$out/checkpoints.tgz" --null -T -
        if [ "$(tar tzf "$out/checkpoints.tgz" | wc -l)" -eq 0 ]; then
            rm "$out/checkpoints.tgz"
            echo "checkpoints of $study: none written since the study began" \
                "($(find "$dir" -type f ! -name '.lease-stamp.*' | wc -l) files in $dir)"
        elif [ "$(stat -c %s "$out/checkpoints.tgz")" -gt 16000000 ]; then
            # over the tool's 16 MiB a file: in parts of 15 MB, at most 3 (8 files in all come
            # back); here `cat checkpoints.tgz.* | tar xz --keep-newer-files` joins them
            split -b 15000000 -d -a 1 "$out/checkpoints.tgz" "$out/checkpoints.tgz."
            rm "$out/checkpoints.tgz"
            if [ -e "$out/checkpoints.tgz.3" ]; then
                rm "$out"/checkpoints.tgz.*
                echo "checkpoints of $study: over 45 MB packed, left behind"
            fi
        fi
    fi
    rm -f "$stamp"
    # a study that wrote no checkpoint leaves no folder of ours behind
    [ "$made" -eq 1 ] && rmdir "$dir" 2>/dev/null
fi
ls -la "$out"
[ "$rc_check" -ne 0 ] && exit "$rc_check"
exit "$rc_study"
