#!/bin/bash
# usage: sweep.sh NAME [loaderbench sweep args...]
name=$1; shift
cd /tmp/nu/run
{ echo "# start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"; echo "# loaderbench sweep $* --output /tmp/nu/record/$name.json"; } > /tmp/nu/record/$name.txt
s=$(date +%s.%N)
COLUMNS=220 PYTHONPATH=/tmp/nu/dsmod /tmp/nu/venv/bin/loaderbench sweep "$@" --no-progress --output /tmp/nu/record/$name.json >> /tmp/nu/record/$name.txt 2>&1
rc=$?
e=$(date +%s.%N)
echo "# end $(date -u +%H:%M:%S) rc=$rc wall=$(echo "$e-$s"|bc) load $(cut -d' ' -f1-3 /proc/loadavg)" >> /tmp/nu/record/$name.txt
COLUMNS=220 /tmp/nu/venv/bin/loaderbench show --verbose /tmp/nu/record/$name.json > /tmp/nu/record/$name.show.txt 2>&1
cat /tmp/nu/record/$name.txt
