package dev.redistb.jedis;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;

import dev.redistb.store.LuaLibrary;
import dev.redistb.testing.Repo;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.jar.JarFile;
import java.util.zip.ZipEntry;
import org.junit.jupiter.api.Test;

/**
 * SPEC E2: the core's artifact ships the script library, copied at build from clients/lua (the one
 * source): under {@code mvn verify} this module's tests see redis-tb-core as its built jar, whose
 * two Lua files must be clients/lua's byte for byte (a run of this module alone reads the core's
 * classes folder, the same copy).
 */
class LuaInJarTest {
  @Test
  void the_core_artifact_holds_tb_lua_and_functions_lua_as_clients_lua_has_them() throws Exception {
    Path where =
        Path.of(LuaLibrary.class.getProtectionDomain().getCodeSource().getLocation().toURI());
    for (String name : new String[] {"tb.lua", "functions.lua"}) {
      byte[] source = Files.readAllBytes(Repo.root().resolve("clients/lua").resolve(name));
      byte[] shipped;
      if (Files.isDirectory(where)) {
        shipped = Files.readAllBytes(where.resolve(LuaLibrary.RESOURCES + name));
      } else {
        try (JarFile jar = new JarFile(where.toFile())) {
          ZipEntry e = jar.getEntry(LuaLibrary.RESOURCES + name);
          assertNotNull(e, name + " is not in " + where);
          shipped = jar.getInputStream(e).readAllBytes();
        }
      }
      assertArrayEquals(source, shipped, name + " in " + where);
    }
    LuaLibrary lua = LuaLibrary.shipped();
    assertEquals(40, lua.sha().length());
    assertEquals(
        LuaLibrary.sha1(Files.readString(Repo.root().resolve("clients/lua/tb.lua"))), lua.sha());
  }
}
