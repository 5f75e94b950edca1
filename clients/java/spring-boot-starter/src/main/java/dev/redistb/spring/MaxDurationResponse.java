package dev.redistb.spring;

import dev.redistb.Decision;
import jakarta.servlet.ServletOutputStream;
import jakarta.servlet.WriteListener;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import jakarta.servlet.http.HttpServletResponseWrapper;
import java.io.IOException;
import java.io.PrintWriter;
import java.io.Writer;

/**
 * SPEC N7 on a servlet response: once the limiter has ended the request at its in-flight policy's
 * max_duration, nothing more of it reaches the client. Every later write and flush raises {@link
 * MaxDurationException} (an {@code IOException}, as for a client that went away), so a streamed
 * body stops at its next write.
 *
 * <p>The servlet API cannot close a connection mid-response, so a streamed (async) response that
 * holds a lease is sent with {@code Connection: close}: when it ends, at the deadline or sooner,
 * the container closes its connection. A response not started by the deadline gets the same header,
 * and the container's own error answer. A write already blocked on a client that reads nothing ends
 * with the container's write timeout (Tomcat's connection-timeout); the slot was freed at the
 * deadline whatever the write does.
 */
final class MaxDurationResponse extends HttpServletResponseWrapper {
  private final HttpServletRequest request;
  private final Decision decision;
  private ServletOutputStream stream;
  private PrintWriter writer;
  private volatile boolean closing;

  MaxDurationResponse(HttpServletRequest request, HttpServletResponse response, Decision decision) {
    super(response);
    this.request = request;
    this.decision = decision;
  }

  /**
   * Before a write: past the deadline it raises; a streamed response is to close its connection.
   */
  private void check() throws MaxDurationException {
    boolean over = decision.timedOut();
    if (!closing && !isCommitted() && (over || request.isAsyncStarted())) {
      closing = true;
      setHeader("Connection", "close");
    }
    if (over) {
      throw new MaxDurationException(decision.lease());
    }
  }

  @Override
  public ServletOutputStream getOutputStream() throws IOException {
    if (stream == null) {
      ServletOutputStream inner = super.getOutputStream();
      stream =
          new ServletOutputStream() {
            @Override
            public void write(int b) throws IOException {
              check();
              inner.write(b);
            }

            @Override
            public void write(byte[] b, int off, int len) throws IOException {
              check();
              inner.write(b, off, len);
            }

            @Override
            public void flush() throws IOException {
              check();
              inner.flush();
            }

            @Override
            public void close() throws IOException {
              check();
              inner.close();
            }

            @Override
            public boolean isReady() {
              return inner.isReady();
            }

            @Override
            public void setWriteListener(WriteListener listener) {
              inner.setWriteListener(listener);
            }
          };
    }
    return stream;
  }

  @Override
  public PrintWriter getWriter() throws IOException {
    if (writer == null) {
      PrintWriter inner = super.getWriter();
      // a PrintWriter swallows IOExceptions (checkError()): past the deadline nothing is written
      writer =
          new PrintWriter(
              new Writer() {
                @Override
                public void write(char[] buf, int off, int len) throws IOException {
                  check();
                  inner.write(buf, off, len);
                }

                @Override
                public void flush() throws IOException {
                  check();
                  inner.flush();
                }

                @Override
                public void close() throws IOException {
                  check();
                  inner.close();
                }
              });
    }
    return writer;
  }

  @Override
  public void flushBuffer() throws IOException {
    check();
    super.flushBuffer();
  }
}
