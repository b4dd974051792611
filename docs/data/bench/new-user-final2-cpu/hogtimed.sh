#!/bin/bash
# usage: hogtimed.sh PREFIX DELAY_S   (DELAY_S empty = no hog)
R=/tmp/nu2/record; P=$1; D=$2
CMD="$(head -1 $R/c3_cmds.txt | sed "s#--output .*#--output $R/$P.json#")"
echo "$CMD   # hog: sleep $D; timeout 3 python3 -c 'while True: pass' (started just before)" > $R/$P.cmd
T0=$(date +%s.%N)
rel() { python3 -c "import time;print(round(time.time()-$T0,2))"; }
if [ -n "$D" ]; then
  ( sleep $D; echo "hog start $(rel)" >> $R/$P.hoglog; timeout 3 python3 -c "while True: pass"; echo "hog end $(rel)" >> $R/$P.hoglog ) &
fi
COLUMNS=250 $CMD > $R/$P.out 2> $R/$P.err
echo "sweep end $(rel)" >> $R/$P.hoglog
wait
