// How the informer recovers from what the API server says inside a watch stream, and
// from being stopped at any moment — with a RestClient stand-in that scripts the server
// (its list pages deliver their items as RestClient.listPage does).
import assert from 'node:assert/strict';
import { it } from 'node:test';
import { Informer, type KubeObject } from '../../src/kube/informer.ts';
import type { RestClient, WatchEvent } from '../../src/kube/rest.ts';
import { silentLogger } from '../../src/log.ts';

const item = (name: string, rv: string): KubeObject => ({ metadata: { name, resourceVersion: rv } });

it('relists after an error the server put in the stream, instead of resuming into it again', async () => {
  const lists: string[] = [];
  const watchedFrom: (string | undefined)[] = [];
  const server = {
    listPage: (_path: string, _req: unknown, onItem: (o: KubeObject) => void): Promise<unknown> => {
      lists.push('list');
      const page =
        lists.length === 1
          ? { items: [item('a', '1')], metadata: { resourceVersion: '1' } }
          : { items: [item('a', '1'), item('b', '7')], metadata: { resourceVersion: '7' } };
      page.items.forEach(onItem);
      return Promise.resolve({ metadata: page.metadata });
    },
    watch: (
      _path: string,
      query: Record<string, unknown>,
      onEvent: (e: WatchEvent) => void,
      signal?: AbortSignal,
    ): Promise<void> => {
      watchedFrom.push(query.resourceVersion as string | undefined);
      if (watchedFrom.length === 1) {
        onEvent({ type: 'ERROR', object: { code: 500, message: 'etcd is compacting' } });
        return Promise.resolve();
      }
      return new Promise((_, reject) =>
        signal?.addEventListener('abort', () => reject(signal.reason as Error)),
      );
    },
  } as unknown as RestClient;
  const informer = new Informer<KubeObject>({
    rest: server,
    path: '/x',
    log: silentLogger(),
    minBackoffMs: 1,
  });
  const added: string[] = [];
  informer.on('add', (o) => added.push(o.metadata.name));
  informer.start();
  const deadline = Date.now() + 5000;
  while (watchedFrom.length < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
  await informer.stop();
  assert.deepEqual(lists, ['list', 'list']);
  assert.deepEqual(watchedFrom, ['1', '7']);
  assert.deepEqual(added, ['a', 'b'], 'what the relist found is reported');
});

it('stops at once when stopped while listing, without opening a watch', async () => {
  let release: () => void = () => undefined;
  let watches = 0;
  const server = {
    listPage: () =>
      new Promise((resolve) => {
        release = () => resolve({ metadata: { resourceVersion: '1' } });
      }),
    watch: () => {
      watches++;
      return new Promise(() => undefined); // a watch that would never end by itself
    },
  } as unknown as RestClient;
  const informer = new Informer<KubeObject>({ rest: server, path: '/x', log: silentLogger() });
  informer.start();
  await new Promise((r) => setTimeout(r, 10));
  const stopped = informer.stop();
  release();
  await stopped;
  assert.equal(watches, 0);
});

it('takes in a write’s response only over the version that write replaced', async () => {
  const server = {
    listPage: (_path: string, _req: unknown, onItem: (o: KubeObject) => void): Promise<unknown> => {
      onItem(item('a', '5'));
      return Promise.resolve({ metadata: { resourceVersion: '5' } });
    },
    watch: (_p: string, _q: unknown, _e: unknown, signal?: AbortSignal): Promise<void> =>
      new Promise((_, reject) => signal?.addEventListener('abort', () => reject(signal.reason as Error))),
  } as unknown as RestClient;
  const informer = new Informer<KubeObject>({ rest: server, path: '/x', log: silentLogger() });
  const updates: string[] = [];
  informer.on('update', (_old: KubeObject, now: KubeObject) =>
    updates.push(now.metadata.resourceVersion ?? ''),
  );
  informer.start();
  await informer.waitForSync();
  informer.applyWritten('4', item('a', '9'));
  assert.equal(
    informer.get('a')?.metadata.resourceVersion,
    '5',
    'a write over another version is not taken in',
  );
  informer.applyWritten(undefined, item('a', '9'));
  assert.equal(
    informer.get('a')?.metadata.resourceVersion,
    '5',
    'a write with no replaced version is not taken in',
  );
  informer.applyWritten('5', item('a', '6'));
  assert.equal(
    informer.get('a')?.metadata.resourceVersion,
    '6',
    'our write over what we read is cached at once',
  );
  informer.applyWritten('5', item('a', '8'));
  assert.equal(informer.get('a')?.metadata.resourceVersion, '6', 'a newer version is never overwritten');
  await informer.stop();
  assert.deepEqual(updates, ['6']);
});

it('takes a bookmark’s resourceVersion without giving it to the transform, which may read a whole object’s fields', async () => {
  const watchedFrom: (string | undefined)[] = [];
  const relists: string[] = [];
  const server = {
    listPage: (_path: string, _req: unknown, onItem: (o: KubeObject) => void): Promise<unknown> => {
      relists.push('list');
      onItem({ metadata: { name: 'a', resourceVersion: '1' }, spec: { nodeName: 'w1' } } as KubeObject);
      return Promise.resolve({ metadata: { resourceVersion: '1' } });
    },
    watch: (
      _path: string,
      query: Record<string, unknown>,
      onEvent: (e: WatchEvent) => void,
      signal?: AbortSignal,
    ): Promise<void> => {
      watchedFrom.push(query.resourceVersion as string | undefined);
      if (watchedFrom.length === 1) {
        onEvent({ type: 'BOOKMARK', object: { metadata: { resourceVersion: '9' } } });
        return Promise.resolve();
      }
      return new Promise((_, reject) =>
        signal?.addEventListener('abort', () => reject(signal.reason as Error)),
      );
    },
  } as unknown as RestClient;
  type WithSpec = KubeObject & { spec: { nodeName: string } };
  const informer = new Informer<WithSpec>({
    rest: server,
    path: '/x',
    log: silentLogger(),
    minBackoffMs: 1,
    transform: (o) => ({ ...o, spec: { nodeName: o.spec.nodeName } }),
  });
  informer.start();
  const deadline = Date.now() + 5000;
  while (watchedFrom.length < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
  await informer.stop();
  assert.deepEqual(watchedFrom, ['1', '9'], 'resumed from the bookmark');
  assert.deepEqual(relists, ['list'], 'no error, so no relist');
});
