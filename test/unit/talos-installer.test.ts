// The installer's exit codes, image names as containerd stores them, and the upgrade
// path the simulated installer checks.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { upgradePathProblem } from '../../sandbox/talos-installer.ts';
import { normalizeImageReference } from '../../src/talos/image-reference.ts';
import { installerExit } from '../../src/talos/installer-exit.ts';
import { parseTalosVersion, type TalosVersionNumber } from '../../src/talos/version.ts';

const v = (text: string) => parseTalosVersion(text) as TalosVersionNumber;

describe('installer exit codes', () => {
  it('reads a 1.14 installer: 2 and 3 permanent, 4 the upgrade path, 5 pulled again', () => {
    const image = 'factory.talos.dev/installer/abc:v1.14.0';
    assert.equal(installerExit(2, image).then, 'never');
    assert.equal(installerExit(3, image).then, 'never');
    assert.match(installerExit(4, image).meaning, /upgrade path/);
    assert.equal(installerExit(5, image).then, 'pull');
    assert.equal(installerExit(7, image).name, 'install');
    assert.equal(installerExit(9, image).name, 'unknown code');
    // Digest-only: read as a current installer.
    assert.equal(installerExit(3, `factory.talos.dev/installer/abc@sha256:${'a'.repeat(64)}`).then, 'never');
  });

  it('reads nothing into the code of an installer before 1.14 (1 for every failure)', () => {
    const old = installerExit(3, 'ghcr.io/siderolabs/installer:v1.13.4');
    assert.equal(old.then, 'fail');
    assert.match(old.meaning, /before Talos 1\.14 exit 1/);
    assert.equal(installerExit(5, 'ghcr.io/siderolabs/installer:v1.14.0-alpha.1').then, 'fail');
    assert.equal(installerExit(5, 'ghcr.io/siderolabs/installer:v1.14.0-alpha.2').then, 'pull');
  });
});

describe('image references as containerd names them', () => {
  it('normalises short names, keeps registries, and names a digested image by its digest', () => {
    assert.equal(normalizeImageReference('alpine:3'), 'docker.io/library/alpine:3');
    assert.equal(
      normalizeImageReference('siderolabs/installer:v1.13.0'),
      'docker.io/siderolabs/installer:v1.13.0',
    );
    assert.equal(normalizeImageReference('docker.io/alpine'), 'docker.io/library/alpine:latest');
    assert.equal(
      normalizeImageReference('factory.talos.dev/installer/abc:v1.14.0'),
      'factory.talos.dev/installer/abc:v1.14.0',
    );
    assert.equal(normalizeImageReference('localhost:5000/installer:v1'), 'localhost:5000/installer:v1');
    const digest = `sha256:${'b'.repeat(64)}`;
    assert.equal(normalizeImageReference(`ghcr.io/x/installer@${digest}`), `ghcr.io/x/installer@${digest}`);
    assert.equal(
      normalizeImageReference(`ghcr.io/x/installer:v1@${digest}`),
      `ghcr.io/x/installer@${digest}`,
    );
  });
});

describe('the upgrade path (Talos compatibility tables)', () => {
  it('upgrades 1.14 from 1.12.0 on, 1.13 from 1.11.0 on, and refuses downgrades past two minors', () => {
    assert.equal(upgradePathProblem(v('1.12.0'), v('1.14.0')), undefined);
    assert.equal(
      upgradePathProblem(v('1.11.6'), v('1.14.0')),
      'host version 1.11.6 is too old to upgrade to Talos 1.14.0',
    );
    assert.equal(upgradePathProblem(v('1.11.0'), v('1.13.2')), undefined);
    assert.match(upgradePathProblem(v('1.10.7'), v('1.13.2')) ?? '', /too old/);
    assert.match(upgradePathProblem(v('1.16.0'), v('1.14.0')) ?? '', /too new to downgrade/);
    assert.match(
      upgradePathProblem(v('1.13.0'), v('1.9.0')) ?? '',
      /upgrades to version 1\.9\.0 are not supported/,
    );
  });
});
