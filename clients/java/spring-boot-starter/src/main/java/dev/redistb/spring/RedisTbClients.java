package dev.redistb.spring;

import java.util.ArrayList;
import java.util.List;

/** The clients the starter made for its own store, closed with the context. */
public final class RedisTbClients implements AutoCloseable {
  private final List<Runnable> closers = new ArrayList<>();

  synchronized void close(Runnable closer) {
    closers.add(closer);
  }

  @Override
  public synchronized void close() {
    for (Runnable r : closers) {
      r.run();
    }
    closers.clear();
  }
}
