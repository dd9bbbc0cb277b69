// A typed GraphQL document: the operation's text with its result and
// variables types attached (phantom: nothing of them exists at run time).
// The generated src/gql/graphql.ts exports one per operation.
export interface TypedDocument<TResult, TVariables> {
  readonly kind: 'query' | 'mutation' | 'subscription';
  readonly operationName: string;
  readonly query: string;
  /** Never set: carries the types for inference. */
  readonly __types?: { result: TResult; variables: TVariables };
}

export type ResultOf<D> = D extends TypedDocument<infer R, unknown> ? R : never;
export type VariablesOf<D> = D extends TypedDocument<unknown, infer V> ? V : never;
