// Prometheus and Alertmanager on loopback, the real servers built by build.sh, for the
// `prometheus` probe, the silence leases and the chart's alert rules:
//
//   scrape targets (file_sd) → Prometheus (rules, 1s scrape/evaluation) → Alertmanager
//
// Targets and rule files are plain files in the directory, so a test changes them while
// both run: targets are picked up by file service discovery, rules by POST /-/reload.
// Alertmanager can be stopped and started again on its port, to play one that goes away.
import { mkdir, rename, rm, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { stringify } from 'yaml';
import { errorMessage, WaitAbortedError, waitFor } from '../src/wait.ts';
import { ensureTool } from './binaries.ts';
import { freePorts, isAlive, logTail, startProcess, stopProcess, type StartedProcess } from './processes.ts';

export interface MonitoringOptions {
  /** Directory for configuration, data and logs; created, and removed by stop. */
  dir: string;
  /** Serve Prometheus under this path (as behind a proxy), e.g. `/prom`. */
  prometheusRoutePrefix?: string;
  /** Start Alertmanager too and send Prometheus's alerts to it. Default true. */
  alertmanager?: boolean;
  /**
   * When set, the servers belong to this process: the directory gets a state.json that
   * the sandbox's `reapOrphans` reads, so a crashed test run leaves nothing running.
   */
  ownerPid?: number;
  log?: (line: string) => void;
}

/** One rule group as Prometheus's rule files hold them. */
export interface RuleGroup {
  name: string;
  interval?: string;
  rules: Record<string, unknown>[];
}

/** A rule as /api/v1/rules reports it. */
export interface LoadedRule {
  name: string;
  type: 'alerting' | 'recording';
  health: string;
  lastError?: string;
  state?: string;
}

/** An alert as Alertmanager's /api/v2/alerts lists it. */
export interface ReceivedAlert {
  labels: Record<string, string>;
  status: { state: string };
}

interface Server {
  process: StartedProcess;
  command: string;
  args: string[];
}

/** Seconds between scrapes and between rule evaluations: short, for tests. */
const INTERVAL = '1s';

export class Monitoring {
  readonly dir: string;
  /** Prometheus's base URL, with the route prefix when there is one (no trailing slash). */
  readonly prometheusUrl: string;
  /** Alertmanager's base URL (no trailing slash), when it runs. */
  readonly alertmanagerUrl: string | undefined;
  private readonly servers = new Map<'prometheus' | 'alertmanager', Server>();

  constructor(dir: string, prometheusUrl: string, alertmanagerUrl: string | undefined) {
    this.dir = dir;
    this.prometheusUrl = prometheusUrl;
    this.alertmanagerUrl = alertmanagerUrl;
  }

  private ownerPid: number | undefined;

  /** @internal */
  async track(name: 'prometheus' | 'alertmanager', server: Server, ownerPid?: number): Promise<void> {
    this.servers.set(name, server);
    this.ownerPid ??= ownerPid;
    await this.saveState();
  }

  /** The part of the sandbox's state.json that `reapOrphans` and `stopSandbox` read. */
  private async saveState(): Promise<void> {
    if (this.ownerPid === undefined) return;
    const state = { version: 1, dir: this.dir, ownerPid: this.ownerPid, processes: this.processes };
    await writeFile(join(this.dir, 'state.json'), JSON.stringify(state, null, 2));
  }

  /** The PIDs to stop, for a sandbox that records its processes. */
  get processes(): { name: string; pid: number; log: string }[] {
    return [...this.servers.entries()].map(([name, s]) => ({ name, pid: s.process.pid, log: s.process.log }));
  }

  /**
   * Scrapes `targets` (host:port, serving /metrics) as job `job`; an empty list stops
   * scraping them. Resolves once Prometheus has scraped every one of them at least once.
   */
  async setTargets(job: string, targets: string[], labels: Record<string, string> = {}): Promise<void> {
    const file = join(this.dir, 'targets', `${job}.json`);
    await writeFile(`${file}.tmp`, JSON.stringify([{ targets, labels: { ...labels, job } }]));
    // Renamed into place so that service discovery never reads half a file.
    await rename(`${file}.tmp`, file);
    await waitFor(
      `Prometheus to scrape ${targets.join(', ') || 'nothing'} as job ${job}`,
      async (observe) => {
        const data = (await this.prometheusApi('/api/v1/targets?state=active')) as {
          activeTargets: { labels: Record<string, string>; lastScrape: string; health: string }[];
        };
        const mine = data.activeTargets.filter((t) => t.labels.job === job);
        observe(JSON.stringify(mine.map((t) => [t.labels.instance, t.health])));
        return mine.length === targets.length && mine.every((t) => t.health !== 'unknown') ? true : undefined;
      },
      { timeoutMs: 30_000, intervalMs: 200 },
    );
  }

  /**
   * Loads rule groups as the file `name` (replacing what it held before), reloads
   * Prometheus and resolves with the rules it loaded from the file, once each has been
   * evaluated (so their health is known).
   */
  async setRules(name: string, groups: RuleGroup[]): Promise<LoadedRule[]> {
    const file = join(this.dir, 'rules', `${name}.yml`);
    await writeFile(file, stringify({ groups }));
    await this.reload();
    return waitFor(
      `Prometheus to load the rules of ${name}.yml`,
      async (observe) => {
        const data = (await this.prometheusApi('/api/v1/rules')) as {
          groups: { file: string; name: string; rules: LoadedRule[] }[];
        };
        const loaded = data.groups.filter((g) => resolve(g.file) === resolve(file));
        observe(JSON.stringify(loaded.map((g) => g.name)));
        const names = groups.map((g) => g.name).sort();
        const rules = loaded.flatMap((g) => g.rules);
        // Evaluated at least once: health is ok or err, no longer unknown.
        return JSON.stringify(loaded.map((g) => g.name).sort()) === JSON.stringify(names) &&
          rules.every((r) => r.health !== 'unknown')
          ? rules
          : undefined;
      },
      { timeoutMs: 20_000, intervalMs: 200 },
    );
  }

  /** Re-reads the configuration and the rule files; throws with Prometheus's reason if it refuses them. */
  async reload(): Promise<void> {
    const res = await fetch(`${this.prometheusUrl}/-/reload`, { method: 'POST' });
    if (!res.ok) throw new Error(`Prometheus refused to reload (${res.status}): ${await res.text()}`);
  }

  /** GET a path of Prometheus's HTTP API; resolves with its `data`. */
  async prometheusApi(path: string): Promise<unknown> {
    const res = await fetch(`${this.prometheusUrl}${path}`);
    const body = (await res.json()) as { status: string; data?: unknown; error?: string };
    if (body.status !== 'success') throw new Error(`Prometheus ${path}: ${body.error ?? res.status}`);
    return body.data;
  }

  /** The alerts Alertmanager has received and still holds (active, silenced or inhibited). */
  async receivedAlerts(): Promise<ReceivedAlert[]> {
    if (!this.alertmanagerUrl) throw new Error('this sandbox runs no Alertmanager');
    const res = await fetch(`${this.alertmanagerUrl}/api/v2/alerts`);
    if (!res.ok) throw new Error(`Alertmanager /api/v2/alerts answered ${res.status}: ${await res.text()}`);
    return (await res.json()) as ReceivedAlert[];
  }

  /** Stops Alertmanager: its port refuses connections until `startAlertmanager`. Its silences are kept. */
  async stopAlertmanager(): Promise<void> {
    const server = this.servers.get('alertmanager');
    if (server) await stopProcess(server.process.pid);
  }

  /** Starts Alertmanager again on the port it had, with the silences it had. */
  async startAlertmanager(): Promise<void> {
    const server = this.servers.get('alertmanager');
    if (!server || !this.alertmanagerUrl) throw new Error('this sandbox runs no Alertmanager');
    if (!server.process.exited && isAlive(server.process.pid)) return;
    server.process = startProcess('alertmanager', server.command, server.args, server.process.log);
    await this.saveState();
    await ready(server.process, `${this.alertmanagerUrl}/-/ready`);
  }

  /** Stops both servers and removes the directory. */
  async stop(): Promise<void> {
    await Promise.all([...this.servers.values()].map((s) => stopProcess(s.process.pid)));
    await rm(this.dir, { recursive: true, force: true });
  }
}

/** Waits until `url` answers 200, failing at once (with the log's tail) if the process exits. */
async function ready(p: StartedProcess, url: string): Promise<void> {
  await waitFor(
    `${p.name} ready at ${url}`,
    async (observe) => {
      if (p.exited) throw new WaitAbortedError(`${p.name} exited (${JSON.stringify(p.exited)})`);
      try {
        return (await fetch(url)).ok ? true : undefined;
      } catch (error) {
        observe(errorMessage(error));
        return undefined;
      }
    },
    { timeoutMs: 60_000, intervalMs: 100 },
  ).catch(async (error: unknown) => {
    throw new Error(`${errorMessage(error)}\n--- last lines of ${p.log} ---\n${await logTail(p.log)}`);
  });
}

/**
 * Starts Prometheus (and Alertmanager) on free loopback ports, building them first if
 * build.sh has not yet. Resolves once both answer /-/ready.
 */
export async function startMonitoring(options: MonitoringOptions): Promise<Monitoring> {
  const log = options.log ?? (() => undefined);
  const dir = resolve(options.dir);
  const withAlertmanager = options.alertmanager ?? true;
  await rm(dir, { recursive: true, force: true });
  await Promise.all(
    ['targets', 'rules', 'logs', 'prometheus-data', 'alertmanager-data'].map((d) =>
      mkdir(join(dir, d), { recursive: true }),
    ),
  );
  const [prometheus, alertmanager] = await Promise.all([
    ensureTool('prometheus', log),
    withAlertmanager ? ensureTool('alertmanager', log) : undefined,
  ]);
  const ports = await freePorts(['prometheus', 'alertmanager']);
  const prefix = (options.prometheusRoutePrefix ?? '').replace(/\/+$/, '');
  const prometheusUrl = `http://127.0.0.1:${String(ports.prometheus)}${prefix}`;
  const alertmanagerUrl = withAlertmanager ? `http://127.0.0.1:${String(ports.alertmanager)}` : undefined;
  const monitoring = new Monitoring(dir, prometheusUrl, alertmanagerUrl);
  let am: StartedProcess | undefined;
  try {
    if (alertmanager) {
      const config = join(dir, 'alertmanager.yml');
      // One receiver that sends nowhere: a test reads what arrived from /api/v2/alerts.
      await writeFile(
        config,
        stringify({
          route: { receiver: 'sandbox', group_wait: '0s', group_interval: '1s', repeat_interval: '1h' },
          receivers: [{ name: 'sandbox' }],
        }),
      );
      const args = [
        `--config.file=${config}`,
        `--storage.path=${join(dir, 'alertmanager-data')}`,
        `--web.listen-address=127.0.0.1:${String(ports.alertmanager)}`,
        // No high-availability peers (it would listen on :9094 on every interface).
        '--cluster.listen-address=',
      ];
      am = startProcess('alertmanager', alertmanager, args, join(dir, 'logs', 'alertmanager.log'));
      await monitoring.track('alertmanager', { process: am, command: alertmanager, args }, options.ownerPid);
    }
    const config = join(dir, 'prometheus.yml');
    await writeFile(
      config,
      stringify({
        global: { scrape_interval: INTERVAL, evaluation_interval: INTERVAL },
        rule_files: [join(dir, 'rules', '*.yml')],
        scrape_configs: [
          {
            job_name: 'sandbox',
            file_sd_configs: [{ files: [join(dir, 'targets', '*.json')], refresh_interval: INTERVAL }],
          },
        ],
        ...(alertmanagerUrl
          ? {
              alerting: {
                alertmanagers: [{ static_configs: [{ targets: [new URL(alertmanagerUrl).host] }] }],
              },
            }
          : {}),
      }),
    );
    const args = [
      `--config.file=${config}`,
      `--storage.tsdb.path=${join(dir, 'prometheus-data')}`,
      `--web.listen-address=127.0.0.1:${String(ports.prometheus)}`,
      `--web.external-url=${prometheusUrl}/`,
      // For POST /-/reload, which picks up rule files a test writes.
      '--web.enable-lifecycle',
    ];
    const p = startProcess('prometheus', prometheus, args, join(dir, 'logs', 'prometheus.log'));
    await monitoring.track('prometheus', { process: p, command: prometheus, args }, options.ownerPid);
    await Promise.all([
      ready(p, `${prometheusUrl}/-/ready`),
      ...(am && alertmanagerUrl ? [ready(am, `${alertmanagerUrl}/-/ready`)] : []),
    ]);
    log(
      `monitoring up: Prometheus ${prometheusUrl}${alertmanagerUrl ? `, Alertmanager ${alertmanagerUrl}` : ''}`,
    );
    return monitoring;
  } catch (error) {
    await monitoring.stop();
    throw error;
  }
}
