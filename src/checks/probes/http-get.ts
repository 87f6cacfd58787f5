// httpGet: healthy when a GET answers with an expected status code and, if asked, a
// JSON body for which a CEL expression (over `body`) holds.
import type { Static } from 'typebox';
import type { HttpGetProbe } from '../../api/cluster-health-check.ts';
import { CelExpressionError, celEngine, formatFieldValue } from '../cel.ts';
import { escapeForUrl, replaceNodeVariables } from '../node-target.ts';
import type { Probe, ProbeContext } from '../probe.ts';
import { resolveHost, resolveService, serviceHost, type ServiceAddress } from '../service-address.ts';
import { bodyExcerpt, describeTarget, httpGet } from './http-request.ts';

export type HttpGetProbeSpec = Static<typeof HttpGetProbe>;

/** A body to evaluate CEL over must fit in memory comfortably; health documents are small. */
const MAX_JSON_BODY = 4 * 1024 * 1024;
/** Without an expression the body only serves messages. */
const MAX_OTHER_BODY = 4 * 1024;

export const httpGetProbe: Probe<HttpGetProbeSpec> = async (spec, context) => {
  // Compile first: a broken expression is a probe error whatever the target answers.
  const { node } = context;
  const program =
    spec.bodyExpression === undefined
      ? undefined
      : celEngine.compile(spec.bodyExpression, node ? ['body', 'node'] : ['body']);
  const { url, address } = await target(spec, context);
  const where = describeTarget(url, address);
  const headers: Record<string, string> = program ? { Accept: 'application/json' } : {};
  for (const { name, value } of spec.httpHeaders ?? [])
    headers[name] = replaceNodeVariables(value, node, `httpGet.httpHeaders[${name}]`);

  const response = await httpGet(url, address, {
    headers,
    insecureSkipTLSVerify: spec.insecureSkipTLSVerify ?? false,
    maxBodyBytes: program ? MAX_JSON_BODY : MAX_OTHER_BODY,
    overflow: program ? 'fail' : 'truncate',
    signal: context.signal,
  });

  const expected = spec.expectedStatusCodes;
  const statusOk = expected?.length
    ? expected.includes(response.status)
    : response.status >= 200 && response.status < 400;
  if (!statusOk) {
    const wanted = expected?.length ? expected.join(', ') : '2xx or 3xx';
    return {
      healthy: false,
      message: `GET ${where} answered ${response.status} (expected ${wanted}): ${bodyExcerpt(response.body)}`,
    };
  }
  if (!program) return { healthy: true, message: `GET ${where} answered ${response.status}` };

  let body: unknown;
  const bindings = (parsed: unknown) => (node ? { body: parsed, node: node.object } : { body: parsed });
  try {
    body = JSON.parse(response.body) as unknown;
  } catch {
    return {
      healthy: false,
      message: `GET ${where} answered ${response.status} with a body that is not JSON, so \`${program.expression}\` cannot hold: ${bodyExcerpt(response.body)}`,
    };
  }
  let holds: boolean;
  try {
    holds = program.evaluate(bindings(body));
  } catch (error) {
    // The body is what is being checked: a field it lacks is a finding, not a probe error.
    if (error instanceof CelExpressionError)
      return { healthy: false, message: `GET ${where} answered ${response.status}, but ${error.message}` };
    throw error;
  }
  const fields = holds ? program.fieldValues(bindings(body)) : program.explainFalse(bindings(body));
  const seen = fields.map(formatFieldValue).slice(0, 5);
  const found = seen.length ? ` (${seen.join(', ')})` : '';
  return holds
    ? {
        healthy: true,
        message: `GET ${where} answered ${response.status} and \`${program.expression}\` holds${found}`,
      }
    : {
        healthy: false,
        message: `GET ${where} answered ${response.status}, but \`${program.expression}\` is false${found}`,
      };
};

async function target(
  spec: HttpGetProbeSpec,
  context: ProbeContext,
): Promise<{ url: URL; address: ServiceAddress }> {
  if (spec.url !== undefined) {
    const url = new URL(replaceNodeVariables(spec.url, context.node, 'httpGet.url', escapeForUrl));
    if (url.protocol !== 'http:' && url.protocol !== 'https:')
      throw new Error(`httpGet.url must be an http:// or https:// URL, not ${url.protocol}//`);
    const port = url.port ? Number(url.port) : url.protocol === 'https:' ? 443 : 80;
    return { url, address: await resolveHost(url.hostname.replace(/^\[|\]$/g, ''), port, context) };
  }
  if (spec.service !== undefined && spec.port !== undefined) {
    const scheme = spec.scheme === 'HTTPS' ? 'https' : 'http';
    const path = replaceNodeVariables(spec.path ?? '/', context.node, 'httpGet.path', escapeForUrl);
    const url = new URL(`${scheme}://${serviceHost(spec.service)}:${spec.port}${path}`);
    return { url, address: await resolveService(spec.service, spec.port, context) };
  }
  throw new Error('httpGet needs either url, or service and port');
}
