// Credentials in URLs never leave the controller. A check or a policy may name a URL with
// user info (https://user:secret@host/) or a token in its query (?token=…); gatehouse
// shows URLs in check messages, /v1/health (unauthenticated), the dashboard, Events,
// logs and the CLI. Every such surface passes its text through here, so one function
// decides what a credential looks like.
//
// String operations, not URL parsing: the rest of the text (and the URL's own spelling)
// stays exactly as it was, and a URL that does not parse is redacted all the same.

/** What stands in for a removed credential. */
export const REDACTED = '***';

/** Query parameter names that look like credentials (matched case-insensitively, anywhere in the name). */
const CREDENTIAL_NAME =
  /token|key|passw(?:or)?d|pwd|secret|signature|credential|auth|^sig$|^x-amz-signature$/i;

/** scheme://[userinfo@]rest — a URL as it appears in text, up to whitespace or a quote. */
const URL_IN_TEXT = /\b([a-z][a-z0-9+.-]*:\/\/)([^\s"'<>`]*)/gi;

function redactQuery(query: string): string {
  return query
    .split('&')
    .map((pair) => {
      const eq = pair.indexOf('=');
      const name = eq === -1 ? pair : pair.slice(0, eq);
      let decoded = name;
      try {
        decoded = decodeURIComponent(name.replace(/\+/g, ' '));
      } catch {
        // A name that does not decode is judged as written.
      }
      return eq !== -1 && CREDENTIAL_NAME.test(decoded) ? `${name}=${REDACTED}` : pair;
    })
    .join('&');
}

function redactRest(rest: string): string {
  // User info ends at the first @ before the path, query or fragment.
  const authorityEnd = rest.search(/[/?#]/);
  const authority = authorityEnd === -1 ? rest : rest.slice(0, authorityEnd);
  const at = authority.lastIndexOf('@');
  let out = at === -1 ? rest : `${REDACTED}@${rest.slice(at + 1)}`;
  const q = out.indexOf('?');
  if (q !== -1) {
    const hash = out.indexOf('#', q);
    const end = hash === -1 ? out.length : hash;
    out = `${out.slice(0, q + 1)}${redactQuery(out.slice(q + 1, end))}${out.slice(end)}`;
  }
  return out;
}

/**
 * A URL without its credentials: user info replaced, and the values of query parameters
 * whose names look like credentials (token, key, password, secret, signature, auth).
 *
 * @example redactURL('https://u:p@prom:9090/api?token=abc&q=up') // 'https://***@prom:9090/api?token=***&q=up'
 */
export function redactURL(url: string | URL): string {
  const text = typeof url === 'string' ? url : url.href;
  const match = /^([a-z][a-z0-9+.-]*:\/\/)(.*)$/is.exec(text);
  return match ? `${match[1] ?? ''}${redactRest(match[2] ?? '')}` : text;
}

/**
 * Free text (a message, an error) with every URL in it redacted as by redactURL.
 *
 * @example redactURLs('GET http://a:b@h/ failed') // 'GET http://***@h/ failed'
 */
export function redactURLs(text: string): string {
  if (!text.includes('://')) return text;
  return text.replace(URL_IN_TEXT, (_, scheme: string, rest: string) => `${scheme}${redactRest(rest)}`);
}
