package dev.redistb;

import static org.junit.jupiter.api.Assertions.fail;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.Set;

/**
 * A vector's object may hold only the fields clients/vectors/README.md documents: a field this
 * runner does not know fails the case, so a new field cannot pass unread.
 */
final class Fields {
  private Fields() {}

  static void only(JsonNode object, Set<String> known, String where) {
    object
        .fieldNames()
        .forEachRemaining(
            f -> {
              if (!known.contains(f)) {
                fail(where + ": a field this runner does not know: " + f);
              }
            });
  }
}
