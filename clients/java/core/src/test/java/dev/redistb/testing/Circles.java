package dev.redistb.testing;

import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.file.Path;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.spi.ToolProvider;

/**
 * The circles among a module's own classes, read from its compiled classes by the JDK's {@code
 * jdeps} (every reference the bytecode holds, same package included), nested classes counted as
 * their top-level class: each strongly connected set of two or more classes.
 */
public final class Circles {
  private Circles() {}

  /** The dependencies of each top-level class of {@code classes} on others under {@code prefix}. */
  public static Map<String, Set<String>> graph(Path classes, String prefix) {
    ToolProvider jdeps =
        ToolProvider.findFirst("jdeps").orElseThrow(() -> new IllegalStateException("no jdeps"));
    StringWriter out = new StringWriter();
    StringWriter err = new StringWriter();
    int rc =
        jdeps.run(
            new PrintWriter(out),
            new PrintWriter(err),
            "-verbose:class",
            "-filter:none",
            classes.toString());
    if (rc != 0) {
      throw new IllegalStateException("jdeps failed: " + err);
    }
    Map<String, Set<String>> g = new TreeMap<>();
    for (String line : out.toString().split("\n")) {
      String[] parts = line.trim().split("\\s+");
      if (parts.length < 3 || !parts[1].equals("->")) {
        continue;
      }
      String from = top(parts[0]);
      String to = top(parts[2]);
      if (from.startsWith(prefix) && to.startsWith(prefix) && !from.equals(to)) {
        g.computeIfAbsent(from, k -> new TreeSet<>()).add(to);
      }
    }
    return g;
  }

  private static String top(String name) {
    int d = name.indexOf('$');
    return d < 0 ? name : name.substring(0, d);
  }

  /** Tarjan's strongly connected components of two or more classes, each sorted. */
  public static List<Set<String>> of(Map<String, Set<String>> g) {
    Map<String, Integer> index = new HashMap<>();
    Map<String, Integer> low = new HashMap<>();
    Deque<String> stack = new ArrayDeque<>();
    Set<String> onStack = new HashSet<>();
    List<Set<String>> out = new ArrayList<>();
    for (String v : g.keySet()) {
      if (!index.containsKey(v)) {
        connect(v, g, index, low, stack, onStack, out);
      }
    }
    return out;
  }

  private static void connect(
      String v,
      Map<String, Set<String>> g,
      Map<String, Integer> index,
      Map<String, Integer> low,
      Deque<String> stack,
      Set<String> onStack,
      List<Set<String>> out) {
    index.put(v, index.size());
    low.put(v, index.get(v));
    stack.push(v);
    onStack.add(v);
    for (String w : g.getOrDefault(v, Set.of())) {
      if (!index.containsKey(w)) {
        connect(w, g, index, low, stack, onStack, out);
        low.put(v, Math.min(low.get(v), low.get(w)));
      } else if (onStack.contains(w)) {
        low.put(v, Math.min(low.get(v), index.get(w)));
      }
    }
    if (low.get(v).equals(index.get(v))) {
      Set<String> c = new TreeSet<>();
      String w;
      do {
        w = stack.pop();
        onStack.remove(w);
        c.add(w);
      } while (!w.equals(v));
      if (c.size() > 1) {
        out.add(c);
      }
    }
  }
}
