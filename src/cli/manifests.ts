// `gatehouse manifests`: everything that installs gatehouse, as multi-document YAML
// for `kubectl apply --server-side -f -`.
import { Command, InvalidArgumentError } from 'commander';
import { DEFAULT_INSTALL, installSet, namespaceProblem, renderYaml } from '../manifests/install-set.ts';

function namespaceArgument(value: string): string {
  const problem = namespaceProblem(value);
  if (problem) throw new InvalidArgumentError(problem);
  return value;
}

function imageArgument(value: string): string {
  if (value.trim() === '' || /\s/.test(value))
    throw new InvalidArgumentError('must be an image reference, e.g. registry.example.com/gatehouse:0.1.0');
  return value;
}

export function manifestsCommand(): Command {
  return new Command('manifests')
    .description(
      'print the install set: Namespace, CRDs, RBAC, admission policy, ServiceAccount and the controller Deployment (apply with kubectl apply --server-side -f -)',
    )
    .option(
      '--namespace <namespace>',
      'namespace the controller runs in',
      namespaceArgument,
      DEFAULT_INSTALL.namespace,
    )
    .option('--image <image>', 'controller image', imageArgument, DEFAULT_INSTALL.image)
    .option(
      '--finalizer-policy',
      'include the MutatingAdmissionPolicy that adds the finalizer at creation (Kubernetes 1.36 and later; saves a write per action)',
      false,
    )
    .action((opts: { namespace: string; image: string; finalizerPolicy: boolean }) => {
      process.stdout.write(renderYaml(installSet(opts)));
    });
}
