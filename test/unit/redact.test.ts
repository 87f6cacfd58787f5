import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { redactURL, redactURLs } from '../../src/redact.ts';

describe('URL redaction', () => {
  it('removes user info and the values of credential-looking query parameters', () => {
    const cases: [string, string][] = [
      ['http://user:secret@host:8080/a?b=1', 'http://***@host:8080/a?b=1'],
      ['https://token@host/', 'https://***@host/'],
      ['https://host/p?token=abc&q=up#top', 'https://host/p?token=***&q=up#top'],
      [
        'https://h/?api_key=1&apiKey=2&password=3&client_secret=4&X-Amz-Signature=5&sig=6&Authorization=7',
        'https://h/?api_key=***&apiKey=***&password=***&client_secret=***&X-Amz-Signature=***&sig=***&Authorization=***',
      ],
      ['https://h/?%74oken=1', 'https://h/?%74oken=***'],
      ['https://h/path@x?design=1&flag', 'https://h/path@x?design=1&flag'],
      ['http://a:b@[::1]:9/', 'http://***@[::1]:9/'],
      ['not a url', 'not a url'],
    ];
    for (const [url, want] of cases) assert.equal(redactURL(url), want, url);
    assert.equal(redactURL(new URL('http://u:p@h/?token=x')), 'http://***@h/?token=***');
  });

  it('finds every URL in free text and leaves the rest as it was', () => {
    assert.equal(
      redactURLs(
        'GET http://u:p@h/x?token=t (via 10.0.0.1:80): connect ECONNREFUSED; see "https://k:s@docs/"',
      ),
      'GET http://***@h/x?token=*** (via 10.0.0.1:80): connect ECONNREFUSED; see "https://***@docs/"',
    );
    assert.equal(redactURLs('no URL here: user:pass@host'), 'no URL here: user:pass@host');
  });
});
