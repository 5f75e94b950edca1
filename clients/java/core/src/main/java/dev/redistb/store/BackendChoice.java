package dev.redistb.store;

/**
 * SPEC E1, E6: the backend a store's calls go through, chosen once.
 *
 * @param backend {@code module} or {@code scripts} (the word of {@code stats.backend} and of the
 *     gauge {@code redis_tb_backend})
 * @param functions with the scripts: true for {@code FCALL} (the Functions library), false for
 *     {@code EVALSHA}
 * @param clientClock with the scripts: the server refuses {@code TIME} in scripts (E5), so every
 *     call carries the client's clock
 * @param line E6's one line
 */
public record BackendChoice(String backend, boolean functions, boolean clientClock, String line) {
  /** Whether the calls go to the script library. */
  public boolean scripts() {
    return "scripts".equals(backend);
  }
}
