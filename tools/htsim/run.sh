#!/bin/bash
# Build htsim with this folder's changes and run NDP and EQDS on the fidelity bench's fabric,
# healthy and with one slow leaf-spine link, for the seeds given (docs/fidelity.md).
# Usage: tools/htsim/run.sh HTSIM_CHECKOUT SEED...   (a checkout of Broadcom/csg-htsim at 841d9e7)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$1; shift
cd "$src"
if ! grep -q slowlink sim/datacenter/main_eqds.cpp; then
    git apply "$here/slow-link-and-sampling.patch"
    cp "$here/flow_sampler.h" sim/datacenter/
fi
(cd sim && make -j2 >/dev/null) && (cd sim/datacenter && make -j2 htsim_ndp htsim_eqds >/dev/null)
out=$src/run; mkdir -p "$out"; cd "$out"
cp "$here/ls_4x4x4.topo" .
B=$src/sim/datacenter
COMMON="-topo ls_4x4x4.topo -q 8 -mtu 1500 -linkspeed 10000 -end 30000 -sample 5000 -sample 29000"
for s in "$@"; do
    python3 "$here/gen_perm.py" "$s" > "perm_s$s.cm"
    for c in healthy slow; do
        SL=""; [ $c = slow ] && SL="-slowlink 1 1 0.1"
        # shellcheck disable=SC2086
        $B/htsim_ndp $COMMON -tm "perm_s$s.cm" -nodes 16 -strat perm -seed "$s" $SL -o x.log > "ndp_${c}_s$s.out"
        for p in 64 256; do
            # shellcheck disable=SC2086
            $B/htsim_eqds $COMMON -tm "perm_s$s.cm" -seed "$s" -paths $p $SL -o x.log > "eqds_p${p}_${c}_s$s.out"
        done
    done
done
python3 "$here/flow_util.py" --leaf 1 ./*.out
