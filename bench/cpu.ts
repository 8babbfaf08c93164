/**
 * Where a benchmark round's CPU went, read from Linux's /proc: the server process, the PostgreSQL
 * processes, this process (the load generator) and the whole machine. Elsewhere `sample` returns
 * null and the bench prints no CPU split.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';

/** Linux reports process and machine CPU in clock ticks of 1/100 s (USER_HZ is 100 on every Linux ABI Node runs on). */
const TICK_US = 10_000;

export interface CpuSample {
  /** Microseconds of CPU since boot (processes) or of busy CPU on all cores (machine). */
  readonly server: number;
  readonly database: number;
  readonly load: number;
  readonly machine: number;
  readonly at: number;
}

/** user + system ticks of one process, 0 if it is gone. */
function processTicks(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command name (which may hold spaces) start at field 3; utime and stime are fields 14 and 15.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return Number(fields[11]) + Number(fields[12]);
  } catch {
    return 0;
  }
}

function postgresTicks(): number {
  let ticks = 0;
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      if (readFileSync(`/proc/${name}/comm`, 'utf8').trim() === 'postgres') ticks += processTicks(Number(name));
    } catch {
      // the process ended while the list was read
    }
  }
  return ticks;
}

function machineBusyTicks(): number {
  const cpu = (readFileSync('/proc/stat', 'utf8').split('\n')[0] as string).trim().split(/\s+/).slice(1).map(Number);
  // user nice system idle iowait irq softirq steal ...: busy is everything but idle and iowait.
  const total = cpu.slice(0, 8).reduce((a, b) => a + b, 0);
  return total - (cpu[3] ?? 0) - (cpu[4] ?? 0);
}

export function sample(serverPid: number): CpuSample | null {
  if (!existsSync('/proc/stat')) return null;
  const own = process.cpuUsage();
  return {
    server: processTicks(serverPid) * TICK_US,
    database: postgresTicks() * TICK_US,
    load: own.user + own.system,
    machine: machineBusyTicks() * TICK_US,
    at: performance.now() * 1000,
  };
}

export interface CpuSplit {
  /** Microseconds of CPU per request. */
  readonly server: number;
  readonly database: number;
  readonly load: number;
  readonly machine: number;
  /** Share of all cores busy during the round. */
  readonly busy: number;
}

export function split(before: CpuSample, after: CpuSample, requests: number): CpuSplit {
  const per = (k: 'server' | 'database' | 'load' | 'machine'): number => (after[k] - before[k]) / requests;
  return {
    server: per('server'),
    database: per('database'),
    load: per('load'),
    machine: per('machine'),
    busy: (after.machine - before.machine) / ((after.at - before.at) * availableParallelism()),
  };
}

export const fmtSplit = (s: CpuSplit): string =>
  `CPU µs/request: server ${s.server.toFixed(0)}, database ${s.database.toFixed(0)}, load generator ${s.load.toFixed(0)}, machine ${s.machine.toFixed(0)} (${(s.busy * 100).toFixed(0)} % of ${availableParallelism()} cores busy)`;
