// Reading a request body as JSON, defensively: the size is bounded before and while
// reading (413), the media type must be JSON (415), the bytes must be UTF-8, the text
// JSON and its strings well-formed Unicode (400) — each refusal saying what was wrong
// and what to send instead.
import type { IncomingMessage } from 'node:http';
import { ApiError } from './api-error.ts';

export const DEFAULT_BODY_LIMIT = 64 * 1024;

function tooLarge(limit: number): ApiError {
  return new ApiError(
    413,
    `the request body is larger than ${String(limit / 1024)} KiB; a NodeAction request is a few hundred bytes`,
    // The rest of the body is not read: the connection cannot be reused.
    { headers: { Connection: 'close' } },
  );
}

/** Whether the request's Content-Type is JSON (application/json or +json, any parameters). */
export function isJsonMediaType(contentType: string | undefined): boolean {
  if (contentType === undefined) return false;
  const essence = contentType.split(';')[0]?.trim().toLowerCase() ?? '';
  return essence === 'application/json' || /^application\/[a-z0-9.+-]+\+json$/.test(essence);
}

/** Rejects early what no body can fix: wrong media type, or too large by its own account. */
export function checkBodyHeaders(req: IncomingMessage, limit = DEFAULT_BODY_LIMIT): void {
  const length = req.headers['content-length'];
  if (length !== undefined && Number(length) > limit) throw tooLarge(limit);
  if (!isJsonMediaType(req.headers['content-type'])) {
    throw new ApiError(
      415,
      `send the request body as JSON with "Content-Type: application/json"${req.headers['content-type'] ? `, not "${req.headers['content-type']}"` : ''}`,
      { headers: { Connection: 'close' } },
    );
  }
}

/** The raw bytes of the body, refusing (and ceasing to read) past `limit`. */
export async function readBody(req: IncomingMessage, limit = DEFAULT_BODY_LIMIT): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > limit) throw tooLarge(limit);
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}

/** The body parsed as JSON (any JSON value; the caller checks its shape). */
export async function readJson(req: IncomingMessage, limit = DEFAULT_BODY_LIMIT): Promise<unknown> {
  checkBodyHeaders(req, limit);
  const bytes = await readBody(req, limit);
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    throw new ApiError(400, 'the request body is not valid UTF-8; send JSON text');
  }
  if (text.trim() === '') throw new ApiError(400, 'the request body is empty; send a JSON object');
  let value: unknown;
  try {
    value = JSON.parse(text) as unknown;
  } catch (error) {
    throw new ApiError(
      400,
      `the request body is not valid JSON (${error instanceof Error ? error.message : String(error)})`,
    );
  }
  const broken = illFormedString(value, '');
  if (broken !== undefined) {
    // JSON may escape a surrogate on its own (\ud800); Kubernetes (Go) would store it as
    // U+FFFD, silently changing what was asked for, so it is refused here instead.
    throw new ApiError(
      400,
      `the request body has an unpaired UTF-16 surrogate escape in ${broken || 'a string'}; send well-formed Unicode text (a character outside the BMP is escaped as a pair, e.g. \\ud83d\\ude00)`,
    );
  }
  return value;
}

/**
 * Where (a field path) the first string or key that is not well-formed Unicode is, if
 * any. Iterative: JSON.parse takes nesting far deeper than the call stack would.
 */
function illFormedString(root: unknown, rootPath: string): string | undefined {
  const stack: [unknown, string][] = [[root, rootPath]];
  for (let next = stack.pop(); next; next = stack.pop()) {
    const [value, at] = next;
    if (typeof value === 'string') {
      if (!value.isWellFormed()) return at;
    } else if (Array.isArray(value)) {
      for (let i = value.length - 1; i >= 0; i--) stack.push([value[i], `${at}[${String(i)}]`]);
    } else if (value !== null && typeof value === 'object') {
      const entries = Object.entries(value);
      for (const [key] of entries)
        if (!key.isWellFormed()) return at ? `a field name in ${at}` : 'a field name';
      for (let i = entries.length - 1; i >= 0; i--) {
        const [key, item] = entries[i] as [string, unknown];
        stack.push([item, at ? `${at}.${key}` : key]);
      }
    }
  }
  return undefined;
}
