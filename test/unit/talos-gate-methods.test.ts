// docs/talos-gate.md lists every Talos API method the gate knows (src/talos-gate/methods.ts),
// with whether it is gated, and the methods table covers every method of the Talos
// versions gatehouse supports that the gate's tests name.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { TALOS_METHODS } from '../../src/talos-gate/methods.ts';

const doc = readFileSync(join(import.meta.dirname, '..', '..', 'docs', 'talos-gate.md'), 'utf8');

describe('docs/talos-gate.md and the gate table', () => {
  it('lists every method, gated or not as the table says', () => {
    for (const [path, facts] of Object.entries(TALOS_METHODS)) {
      const name = path
        .slice(1)
        .replace('/', '.')
        .replace(/^machine\./, '');
      const row = doc.split('\n').find((l) => l.startsWith(`| \`${name}\``));
      assert.ok(row, `${name} is not in the table of docs/talos-gate.md`);
      assert.equal(
        row.includes('gated:') || row.includes('bypass holders only'),
        facts.gating.gated !== false,
        `${name}: the page and the table disagree on whether it is gated`,
      );
    }
  });

  it('lists no method the table does not know', () => {
    const known = new Set(
      Object.keys(TALOS_METHODS).map((p) =>
        p
          .slice(1)
          .replace('/', '.')
          .replace(/^machine\./, ''),
      ),
    );
    const rows = doc
      .split('\n')
      .filter((l) => /^\| `[A-Za-z.]+` \|/.test(l))
      .map((l) => /^\| `([^`]+)`/.exec(l)?.[1] ?? '');
    const methods = rows.filter((r) => /Service|State/.test(r));
    assert.deepEqual(
      methods.filter((m) => !known.has(m)),
      [],
    );
  });
});
