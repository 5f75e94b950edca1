package dev.redistb.spring;

import dev.redistb.RequestView;

/**
 * SPEC K4, K6: the hash tag of a request's keys, for a Redis Cluster: a bean of this type is the
 * tag function of the limiters the starter builds (the main one, the {@link RateLimit} ones). Every
 * key of one call then shares the tag's slot; a tag per tenant or user spreads the clients over the
 * cluster. Null or empty is no tag. Without it, a limiter that sends several keys in one call
 * refuses to start on a cluster (U3). (The gateway's routes with more limits are tagged with the
 * key resolver's id.)
 *
 * <pre>{@code
 * @Bean
 * HashTag tenant() {
 *   return req -> req.firstHeader("x-tenant");
 * }
 * }</pre>
 */
@FunctionalInterface
public interface HashTag {
  String tag(RequestView request);
}
