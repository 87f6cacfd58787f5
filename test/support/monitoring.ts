// Real Prometheus and Alertmanager for a test (sandbox/monitoring.ts), and what stands
// around them in a real installation: an exporter whose metrics the test sets, and a
// reverse proxy that demands a bearer token (Prometheus itself only checks basic auth).
import { mkdir, mkdtemp } from 'node:fs/promises';
import { createServer, request, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { Gauge, Registry } from 'prom-client';
import { cacheDir } from '../../src/cache-dir.ts';
import { marker, type Silence } from '../../src/silences/client.ts';
import { startMonitoring, type Monitoring, type MonitoringOptions } from '../../sandbox/monitoring.ts';

/** Prometheus (and Alertmanager) of this test process alone, reaped if the process dies. */
export async function startTestMonitoring(
  options: Omit<MonitoringOptions, 'dir' | 'ownerPid'> = {},
): Promise<Monitoring> {
  const base = join(cacheDir(), 'test-sandboxes');
  await mkdir(base, { recursive: true });
  return startMonitoring({
    ...options,
    dir: await mkdtemp(join(base, 'monitoring-')),
    ownerPid: process.pid,
  });
}

async function listen(server: Server): Promise<number> {
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  return (server.address() as AddressInfo).port;
}

async function close(server: Server): Promise<void> {
  const closed = new Promise<void>((resolve) => server.close(() => resolve()));
  server.closeAllConnections();
  await closed;
}

/** An exporter serving one gauge, `name{labels}`, whose value the test sets. */
export async function gaugeExporter(name: string, help: string, labelNames: string[] = []) {
  const registry = new Registry();
  const gauge = new Gauge({ name, help, labelNames, registers: [registry] });
  const server = createServer((_req, res) => {
    void registry.metrics().then((text) => {
      res.writeHead(200, { 'Content-Type': registry.contentType }).end(text);
    });
  });
  const port = await listen(server);
  return { gauge, target: `127.0.0.1:${String(port)}`, close: () => close(server) };
}

/**
 * A reverse proxy in front of `upstream` that records each request's Authorization header
 * and, given a token, answers 401 to any request without `Authorization: Bearer <token>`
 * (what kube-rbac-proxy or an ingress does for a Prometheus users reach with a token).
 */
export async function prometheusProxy(upstream: string, token?: string) {
  const target = new URL(upstream);
  const requests: { url: string; authorization: string | undefined }[] = [];
  const server = createServer((req, res) => {
    requests.push({ url: req.url ?? '', authorization: req.headers.authorization });
    if (token !== undefined && req.headers.authorization !== `Bearer ${token}`) {
      res.writeHead(401, { 'Content-Type': 'text/plain' }).end('Unauthorized\n');
      return;
    }
    const headers: IncomingHttpHeaders = { ...req.headers, host: target.host };
    delete headers.authorization;
    const forwarded = request(
      { host: target.hostname, port: target.port, path: req.url, method: req.method, headers },
      (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      },
    );
    forwarded.on('error', (error) => res.writeHead(502).end(error.message));
    req.pipe(forwarded);
  });
  const port = await listen(server);
  return { url: `http://127.0.0.1:${String(port)}`, port, requests, close: () => close(server) };
}

/** A silence as Alertmanager's v2 API lists it. */
export type ListedSilence = Silence & { updatedAt: string };

/** Every silence Alertmanager at `url` holds (expired ones too, until they are purged). */
export async function listSilences(url: string): Promise<ListedSilence[]> {
  const res = await fetch(`${url}/api/v2/silences`);
  if (!res.ok)
    throw new Error(`Alertmanager /api/v2/silences answered ${String(res.status)}: ${await res.text()}`);
  return (await res.json()) as ListedSilence[];
}

/** The silences gatehouse holds for an action, found as gatehouse finds them: by the UID in the comment. */
export async function silencesForAction(url: string, uid: string): Promise<ListedSilence[]> {
  return (await listSilences(url)).filter((s) => s.comment.includes(marker(uid)));
}
