// prometheus: a PromQL instant query must return nothing (or only values in a range),
// or no firing alert may match a list of matchers (kured's alert gate, for any alert).
// Spoken over the Prometheus HTTP API, which Thanos, Mimir and VictoriaMetrics serve too.
import type { Static } from 'typebox';
import type { PrometheusProbe } from '../../api/cluster-health-check.ts';
import { KubeApiError } from '../../kube/rest.ts';
import { redactURL } from '../../redact.ts';
import type { Probe, ProbeContext } from '../probe.ts';
import { resolveHost } from '../service-address.ts';
import { bodyExcerpt, describeTarget, httpGet } from './http-request.ts';
import { count, someOf } from './kube-list.ts';

export type PrometheusProbeSpec = Static<typeof PrometheusProbe>;

/** A key of a Secret in the controller's namespace. */
interface SecretKeyReference {
  name: string;
  key: string;
}

/** Query results and alert lists can be large; past this something is wrong with the query. */
const MAX_BODY = 8 * 1024 * 1024;

interface ApiEnvelope {
  status?: unknown;
  data?: unknown;
  errorType?: unknown;
  error?: unknown;
}

type Labels = Record<string, string>;
// Prometheus sends values as strings; some compatible servers send numbers.
type SamplePair = [number, string | number];

interface Sample {
  metric?: Labels;
  value?: SamplePair;
  values?: SamplePair[];
}

interface Alert {
  labels?: Labels;
  state?: string;
}

export const prometheusProbe: Probe<PrometheusProbeSpec> = async (spec, context) => {
  if (spec.query !== undefined) return queryProbe(spec, spec.query, context);
  if (spec.alerts !== undefined) return alertsProbe(spec, spec.alerts.matchers ?? [], context);
  throw new Error('prometheus needs either query or alerts');
};

async function queryProbe(spec: PrometheusProbeSpec, query: string, context: ProbeContext) {
  const data = await callApi(spec, '/api/v1/query', { query }, context);
  const { resultType, result } = (data ?? {}) as { resultType?: unknown; result?: unknown };
  const samples = samplesOf(resultType, result, query);
  const range = spec.valueRange;
  const q = `query \`${query}\``;

  if (range === undefined) {
    if (samples.length === 0) return { healthy: true, message: `${q} returned no samples, as required` };
    const shown = samples.map((s) => `${s.series} ${s.value}`);
    return {
      healthy: false,
      message: `${q} returned ${count(samples.length, 'sample')}, expected none: ${someOf(shown, 5, ', ')}`,
    };
  }

  const bounds = `[${range.min ?? '-Inf'}, ${range.max ?? '+Inf'}]`;
  // An empty answer proves nothing about the range (a stopped exporter returns nothing): fail closed.
  if (samples.length === 0)
    return { healthy: false, message: `${q} returned no samples; the range ${bounds} needs at least one` };
  const outside = samples.filter((s) => {
    const v = parseSampleValue(s.value);
    return (
      Number.isNaN(v) ||
      (range.min !== undefined && v < range.min) ||
      (range.max !== undefined && v > range.max)
    );
  });
  if (outside.length === 0)
    return {
      healthy: true,
      message: `${q}: ${samples.length === 1 ? 'its sample lies' : `all ${samples.length} samples lie`} in ${bounds} (${someOf(
        samples.map((s) => `${s.series} ${s.value}`),
        3,
        ', ',
      )})`,
    };
  return {
    healthy: false,
    message: `${q}: ${outside.length}/${count(samples.length, 'sample')} outside ${bounds}: ${someOf(
      outside.map((s) => `${s.series} ${s.value}`),
      5,
      ', ',
    )}`,
  };
}

async function alertsProbe(spec: PrometheusProbeSpec, matchers: readonly string[], context: ProbeContext) {
  const parsed = matchers.map(parseMatcher);
  const data = await callApi(spec, '/api/v1/alerts', {}, context);
  const alerts = (data as { alerts?: unknown } | undefined)?.alerts;
  if (!Array.isArray(alerts))
    throw new Error(
      `Prometheus at ${redactURL(spec.url)} answered /api/v1/alerts without a data.alerts list`,
    );
  const firing = (alerts as Alert[]).filter((a) => a.state === 'firing');
  const matching = firing.filter((a) => parsed.every((m) => m.matches(a.labels ?? {})));
  const names = someOf(
    matching.map((a) => seriesName(a.labels ?? {}, 'alertname')),
    5,
    ', ',
  );
  if (matchers.length === 0)
    return matching.length === 0
      ? { healthy: true, message: 'no alert firing (no matchers: any firing alert would count)' }
      : {
          healthy: false,
          message: `${count(matching.length, 'alert')} firing (no matchers: any counts): ${names}`,
        };
  const list = matchers.join(', ');
  if (matching.length === 0)
    return {
      healthy: true,
      message: `no firing alert matches ${list} (${count(firing.length, 'alert')} firing in all)`,
    };
  return {
    healthy: false,
    message: `${count(matching.length, 'firing alert')} ${matching.length === 1 ? 'matches' : 'match'} ${list}: ${names}`,
  };
}

/** GETs an API path under the base URL and returns `data`, or throws saying what came back instead. */
async function callApi(
  spec: PrometheusProbeSpec,
  apiPath: string,
  params: Record<string, string>,
  context: ProbeContext,
): Promise<unknown> {
  const base = new URL(spec.url);
  const url = new URL(`${base.pathname.replace(/\/+$/, '')}${apiPath}`, base);
  for (const [k, v] of Object.entries(params)) url.searchParams.set(k, v);
  const port = base.port ? Number(base.port) : base.protocol === 'https:' ? 443 : 80;
  const address = await resolveHost(base.hostname.replace(/^\[|\]$/g, ''), port, context);
  const headers: Record<string, string> = { Accept: 'application/json' };
  if (spec.bearerTokenSecretRef)
    headers.Authorization = `Bearer ${await readSecretKey(spec.bearerTokenSecretRef, context)}`;

  const response = await httpGet(url, address, {
    headers,
    maxBodyBytes: MAX_BODY,
    overflow: 'fail',
    signal: context.signal,
  });
  const where = `Prometheus at ${describeTarget(base, address)}`;
  let envelope: ApiEnvelope;
  try {
    envelope = JSON.parse(response.body) as ApiEnvelope;
  } catch {
    throw new Error(
      `${where} answered ${apiPath} with ${response.status} and a body that is not JSON (is this the Prometheus API?): ${bodyExcerpt(response.body)}`,
    );
  }
  if (envelope.status === 'error' || response.status >= 400) {
    const type = typeof envelope.errorType === 'string' ? ` ${envelope.errorType}` : '';
    const error = typeof envelope.error === 'string' ? envelope.error : bodyExcerpt(response.body);
    throw new Error(`${where} refused ${apiPath} (${response.status}${type}): ${error}`);
  }
  if (envelope.status !== 'success')
    throw new Error(`${where} answered ${apiPath} without status "success": ${bodyExcerpt(response.body)}`);
  return envelope.data;
}

async function readSecretKey(ref: SecretKeyReference, context: ProbeContext): Promise<string> {
  const what = `bearer token Secret ${context.namespace}/${ref.name}`;
  let secret: { data?: Record<string, string> };
  try {
    secret = await context.rest.request(`/api/v1/namespaces/${context.namespace}/secrets/${ref.name}`, {
      signal: context.signal,
    });
  } catch (error) {
    if (error instanceof KubeApiError)
      throw new Error(`cannot read ${what}: ${error.serverMessage || error.message}`, { cause: error });
    throw error;
  }
  const encoded = secret.data?.[ref.key];
  if (encoded === undefined) {
    const keys = Object.keys(secret.data ?? {});
    throw new Error(`${what} has no key ${ref.key} (it has ${keys.length ? keys.join(', ') : 'no keys'})`);
  }
  const token = Buffer.from(encoded, 'base64').toString('utf8').trim();
  if (!token) throw new Error(`${what} key ${ref.key} is empty`);
  return token;
}

interface FoundSample {
  series: string;
  value: string;
}

function samplesOf(resultType: unknown, result: unknown, query: string): FoundSample[] {
  const malformed = () =>
    new Error(`Prometheus answered \`${query}\` with a malformed ${String(resultType)} result`);
  switch (resultType) {
    case 'vector':
    case 'matrix': {
      if (!Array.isArray(result)) throw malformed();
      const samples: FoundSample[] = [];
      for (const s of result as Sample[]) {
        const series = seriesName(s.metric ?? {});
        const pairs = resultType === 'vector' ? [s.value] : (s.values ?? []);
        // Native histogram samples carry no float value: they cannot lie in a range.
        if (resultType === 'vector' && s.value === undefined) samples.push({ series, value: '(histogram)' });
        for (const pair of pairs) if (pair) samples.push({ series, value: String(pair[1]) });
      }
      return samples;
    }
    case 'scalar':
      if (!Array.isArray(result) || result.length < 2) throw malformed();
      return [{ series: 'scalar', value: String((result as SamplePair)[1]) }];
    default:
      throw new Error(
        `Prometheus answered \`${query}\` with a ${String(resultType)} result; the query must give an instant vector or a scalar`,
      );
  }
}

/** Prometheus writes special floats as "+Inf", "-Inf" and "NaN". */
function parseSampleValue(text: string): number {
  if (text === '+Inf' || text === 'Inf') return Infinity;
  if (text === '-Inf') return -Infinity;
  const value = Number(text);
  return text.trim() === '' ? NaN : value;
}

/** `up{instance="a", job="b"}`, as Prometheus prints series. */
function seriesName(labels: Labels, nameLabel = '__name__'): string {
  const name = labels[nameLabel] ?? '';
  const rest = Object.entries(labels)
    .filter(([k]) => k !== nameLabel)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([k, v]) => `${k}=${JSON.stringify(v)}`);
  return rest.length ? `${name}{${rest.join(', ')}}` : name || '{}';
}

interface Matcher {
  matches(labels: Labels): boolean;
}

/** `label="v"`, `label!="v"`, `label=~"re"`, `label!~"re"`, as the schema admits them. */
export function parseMatcher(text: string): Matcher {
  const match = /^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"\s*$/.exec(text);
  if (!match)
    throw new Error(`prometheus.alerts.matchers: cannot read ${text}; write e.g. severity="critical"`);
  const [, label = '', op, value = ''] = match;
  // A missing label matches as the empty string, as in PromQL.
  const get = (labels: Labels) => labels[label] ?? '';
  if (op === '=') return { matches: (l) => get(l) === value };
  if (op === '!=') return { matches: (l) => get(l) !== value };
  let re: RegExp;
  try {
    re = new RegExp(`^(?:${value})$`); // PromQL regular expressions are fully anchored
  } catch (error) {
    throw new Error(
      `prometheus.alerts.matchers: ${text} has an invalid regular expression: ${error instanceof Error ? error.message : String(error)}`,
      { cause: error },
    );
  }
  return op === '=~' ? { matches: (l) => re.test(get(l)) } : { matches: (l) => !re.test(get(l)) };
}
