import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  compareTalosVersions,
  formatTalosVersion,
  hasLifecycleUpgrade,
  imageTag,
  installerVersion,
  osImageOf,
  parseTalosVersion,
  talosVersionFromOsImage,
} from '../../src/talos/version.ts';

const v = (text: string) => {
  const parsed = parseTalosVersion(text);
  assert.ok(parsed, text);
  return parsed;
};

describe('Talos versions', () => {
  it('reads the version from a Node osImage, and writes it back', () => {
    assert.deepEqual(talosVersionFromOsImage('Talos (v1.13.0)'), {
      major: 1,
      minor: 13,
      patch: 0,
      prerelease: '',
    });
    assert.equal(osImageOf(v('v1.12.4')), 'Talos (v1.12.4)');
    assert.equal(talosVersionFromOsImage('Ubuntu 24.04 LTS'), undefined);
    assert.equal(talosVersionFromOsImage(undefined), undefined);
  });

  it('reads the version an installer image installs from its tag', () => {
    assert.equal(imageTag('ghcr.io/siderolabs/installer:v1.13.1'), 'v1.13.1');
    assert.equal(imageTag('factory.talos.dev/installer/abc123:v1.13.1@sha256:0123'), 'v1.13.1');
    assert.equal(imageTag('localhost:5000/installer'), undefined);
    assert.equal(imageTag('localhost:5000/installer:v1.12.0'), 'v1.12.0');
    assert.equal(
      formatTalosVersion(installerVersion('ghcr.io/siderolabs/installer:v1.14.0-beta.1') ?? v('v0.0.0')),
      'v1.14.0-beta.1',
    );
    assert.equal(installerVersion('ghcr.io/siderolabs/installer:latest'), undefined);
  });

  it('orders versions, prereleases before their release', () => {
    const order = [
      'v1.12.9',
      'v1.13.0-alpha.2',
      'v1.13.0-alpha.10',
      'v1.13.0-beta.0',
      'v1.13.0',
      'v1.13.1',
      'v2.0.0',
    ];
    for (let i = 0; i + 1 < order.length; i++) {
      assert.ok(
        compareTalosVersions(v(order[i] ?? ''), v(order[i + 1] ?? '')) < 0,
        `${String(order[i])} < ${String(order[i + 1])}`,
      );
      assert.ok(compareTalosVersions(v(order[i + 1] ?? ''), v(order[i] ?? '')) > 0);
    }
    assert.equal(compareTalosVersions(v('v1.13.0'), v('1.13.0')), 0);
  });

  it('upgrades through LifecycleService from Talos 1.13 on, as talosctl does', () => {
    assert.equal(hasLifecycleUpgrade(v('v1.12.6')), false);
    assert.equal(hasLifecycleUpgrade(v('v1.13.0-alpha.2')), false);
    assert.equal(hasLifecycleUpgrade(v('v1.13.0-beta.0')), true);
    assert.equal(hasLifecycleUpgrade(v('v1.13.0')), true);
    assert.equal(hasLifecycleUpgrade(v('v1.14.2')), true);
  });
});
